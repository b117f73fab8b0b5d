package request

import (
	"encoding/json"
	"testing"
)

// TestRewriteKeysPerTenant: RewriteWith with a tenant keys each
// abuse-attribution id sent as a string, replaces a sent cache_salt with
// the tenant's and adds one only where asked; every other byte is as
// sent.
func TestRewriteKeysPerTenant(t *testing.T) {
	salt := string(CacheSalt(nil, "t1"))
	tests := []struct {
		name, body string
		salt       bool
		want       string
	}{
		{"nothing to key", `{"model":"m","x":1}`, false, `{"model":"m","x":1}`},
		{"user", `{"model":"m","user":"alice"}`, false, `{"model":"m","user":"t1:alice"}`},
		{"escaped safety_identifier", `{"model":"m","safety_identifier":"a\u006c"}`, false, `{"model":"m","safety_identifier":"t1:al"}`},
		{"metadata.user_id", `{"metadata":{"user_id":"u","k":"v"},"model":"m"}`, false, `{"metadata":{"user_id":"t1:u","k":"v"},"model":"m"}`},
		{"null ids stay", `{"model":"m","user":null,"metadata":{"user_id":null}}`, false, `{"model":"m","user":null,"metadata":{"user_id":null}}`},
		{"salt added", `{"model":"m","x":1}`, true, `{"model":"m","cache_salt":"` + salt + `","x":1}`},
		{"salt replaced", `{"model":"m","cache_salt":"other"}`, false, `{"model":"m","cache_salt":"` + salt + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseBody([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got := string(p.RewriteWith(nil, []byte(tt.body), Changes{Tenant: "t1", SaltCache: tt.salt}))
			if got != tt.want || !json.Valid([]byte(got)) {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`{"model":"m","user":1}`, `{"model":"m","cache_salt":{}}`, `{"model":"m","metadata":{"user_id":[]}}`,
		`{"model":"m","user":"a","User":"b"}`, `{"model":"m","metadata":{"user_id":"a","user_\u0069d":"b"}}`} {
		if _, err := ParseBody([]byte(bad)); err == nil {
			t.Errorf("%s: read, want refused", bad)
		}
	}
	if a, b := string(CacheSalt(nil, "t1")), string(CacheSalt(nil, "t2")); a == b || len(a) != 32 {
		t.Fatalf("salts %s %s", a, b)
	}
}
