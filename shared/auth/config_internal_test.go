package auth

import (
	"strings"
	"testing"
)

// TestDefaults: a zero Config takes the defaults the config file's auth
// section documents.
func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.TenantClaim != "tid" || strings.Join(c.Algorithms, ",") != "RS256,ES256" || c.MaxTokenBytes != 8192 {
		t.Fatalf("defaults not applied: %+v", c)
	}
}
