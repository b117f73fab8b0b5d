package problem

import (
	"strings"
	"testing"
	"time"
)

func TestPaths(t *testing.T) {
	var list []string
	top := Into(&list, "")
	top.Add("listen", "bad %d", 1)
	auth := top.In("auth")
	auth.Add("issuer", "required")
	auth.Item("audiences", 2).Add("", "empty")
	auth.Add("jwks_url", "names %s", auth.Name("issuer"))
	Into(&list, "tenants").Item("", 0).Add("id", "required")
	At{}.Add("x", "dropped")
	want := []string{"listen: bad 1", "auth.issuer: required", "auth.audiences[2]: empty", "auth.jwks_url: names auth.issuer", "tenants[0].id: required"}
	if strings.Join(list, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", list, want)
	}
	if Err("x", nil) != nil {
		t.Fatal("no problems is no error")
	}
	if err := Err("auth", list[1:3]); err == nil || err.Error() != "auth: invalid config: auth.issuer: required; auth.audiences[2]: empty" {
		t.Fatalf("Err = %v", err)
	}
}

func TestNotNegative(t *testing.T) {
	var list []string
	at := Into(&list, "limiter")
	NotNegative(at, "timeout", -time.Second)
	NotNegative(at, "dial_timeout", time.Duration(0))
	NotNegative(at, "breaker_threshold", -2)
	if got := strings.Join(list, "|"); got != "limiter.timeout: must not be negative, got -1s|limiter.breaker_threshold: must not be negative, got -2" {
		t.Fatalf("got %q", got)
	}
}

func TestNeedEnv(t *testing.T) {
	var list []string
	at := Into(&list, "store")
	getenv := func(name string) string { return map[string]string{"SET": "x"}[name] }
	NeedEnv(at, "redis_url_env", "UNSET", getenv)
	NeedEnv(at, "redis_url_env", "SET", getenv)
	NeedEnv(at, "redis_password_env", "", getenv)
	if got := strings.Join(list, "|"); got != "store.redis_url_env: environment variable UNSET is not set" {
		t.Fatalf("got %q", got)
	}
}
