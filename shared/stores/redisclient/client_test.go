package redisclient_test

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

func TestNewClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url, password string
		wantErr             bool
		wantTLS             bool
		wantPassword        string
	}{
		{name: "plain", url: "redis://127.0.0.1:6379/0"},
		{name: "tls", url: "rediss://cache.example.net:6380", wantTLS: true},
		{name: "password override", url: "redis://:inurl@h:1", password: "fromenv", wantPassword: "fromenv"},
		{name: "password from url", url: "redis://:inurl@h:1", wantPassword: "inurl"},
		{name: "bad scheme", url: "http://h", wantErr: true},
		{name: "empty", url: "", wantErr: true},
		{name: "unparsable keeps secret out", url: "redis://:hunter2@h:1/%zz", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisclient.NewClient(redisclient.ClientOptions{URL: tc.url, Password: tc.password})
			if tc.wantErr {
				if err == nil {
					_ = c.Close()
					t.Fatal("want an error")
				}
				if tc.url != "" && strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.Options()
			if (o.TLSConfig != nil) != tc.wantTLS {
				t.Errorf("TLS = %v, want %v", o.TLSConfig != nil, tc.wantTLS)
			}
			if o.Password != tc.wantPassword {
				t.Errorf("password = %q, want %q", o.Password, tc.wantPassword)
			}
			if o.MaxRetries != 0 || !o.ContextTimeoutEnabled || o.ReadTimeout != store.DefaultTimeout || o.MinIdleConns != 0 {
				t.Errorf("tuning not applied: retries %d, ctx timeouts %v, read timeout %s, min idle %d",
					o.MaxRetries, o.ContextTimeoutEnabled, o.ReadTimeout, o.MinIdleConns)
			}
		})
	}
}
