package upstream

import (
	"slices"
	"strings"

	"github.com/llmgw/gateway/shared/problem"
)

// CheckPool reports the problems with a pool's kind and the caller headers
// it forwards, under at (the pool, whose fields are kind and
// forward_headers). The gateway's config check calls it for each pool.
func CheckPool(at problem.At, kind string, forward, fields []string, unknown string) {
	if kinds := Kinds(); !slices.Contains(kinds, kind) {
		at.Add("kind", "must be %s, not %q", orList(kinds), kind)
	}
	for i, h := range forward {
		if err := CheckForward(h); err != nil {
			at.Item("forward_headers", i).Add("", "%v", err)
		}
	}
	for i, f := range fields {
		if err := CheckField(f); err != nil {
			at.Item("fields", i).Add("", "%v", err)
		}
	}
	CheckUnknownFields(at, unknown)
}

// DefaultUnknownFields is what becomes of a body member no field table
// names when neither the pool nor the tenant says: dropped and named,
// so that a field a new SDK sends degrades instead of failing.
const DefaultUnknownFields = "drop"

// CheckUnknownFields: unknown_fields is drop or refuse (or absent).
func CheckUnknownFields(at problem.At, v string) {
	if v != "" && v != "drop" && v != "refuse" {
		at.Add("unknown_fields", "must be drop or refuse, not %q", v)
	}
}

// Check reports the problems with s's settings that depend on its kind,
// and with the organization and project it would send as headers, under at (the endpoint, whose fields are auth, azure_api, organization
// and project); entra says the endpoint authenticates with Entra ID. The
// rules are the kinds' rows (kind.go); the gateway's config check calls
// it for each endpoint.
func (s TargetSpec) Check(at problem.At, entra bool) {
	k := registered(s.Kind)
	if k == nil {
		return // CheckPool names the kind
	}
	if entra && !k.entra {
		at.Add("auth", "entra is only for %s pools", andList(kindsWhere(func(r registration) bool { return r.entra })))
	}
	// One problem a field: a value on a kind that does not send it is
	// reported as that, whatever it holds.
	for _, h := range []struct{ field, value string }{{"organization", s.Organization}, {"project", s.Project}} {
		switch {
		case h.value == "":
		case !k.account:
			at.Add(h.field, "only for %s pools, not %s", orList(kindsWhere(func(r registration) bool { return r.account })), s.Kind)
		case !headerValue(h.value):
			at.Add(h.field, "must be a printable header value without line breaks or surrounding spaces")
		}
	}
	if k.check != nil {
		k.check(at, s)
	}
}

// WithDefaults returns s with its kind's zero settings replaced by their
// defaults (an azure-openai endpoint's api-version).
func (s TargetSpec) WithDefaults() TargetSpec {
	if k := registered(s.Kind); k != nil && k.defaults != nil {
		return k.defaults(s)
	}
	return s
}

// headerValue reports whether s can be sent as an HTTP header value as
// written (RFC 9110 §5.5: visible characters, inner spaces and tabs):
// organization and project are sent as OpenAI-Organization and
// OpenAI-Project.
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}

// orList writes a, b or c.
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// andList writes a, b and c.
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
