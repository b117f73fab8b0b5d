package dispatch

import (
	"bytes"
	"mime"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// isJSONMedia is checkBody's media-type test as it was before plainJSON:
// mime.ParseMediaType for every Content-Type.
func isJSONMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// FuzzPlainJSON: plainJSON, checkBody's shortcut past
// mime.ParseMediaType, says JSON only of what ParseMediaType calls
// JSON (whatever it says no to goes on to ParseMediaType).
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{"application/json", "Application/JSON", " application/json\t", "application/json;",
		"application/json; charset=utf-8", "application/jſon", "applİcation/json", "text/json", "application/json\u00a0",
		"application/problem+json", "application/json x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if plainJSON(ct) && !isJSONMedia(ct) {
			t.Fatalf("plainJSON(%q), but mime.ParseMediaType does not call it JSON", ct)
		}
	})
}

func TestPlainJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json": true, "APPLICATION/Json": true, " application/json ": true,
		"application/json; charset=utf-8": false, // ParseMediaType's, with its parameters
		"application/jſon":                false, "text/json": false, "": false,
	} {
		if got := plainJSON(ct); got != want {
			t.Errorf("plainJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestRewriteExactSize: an attempt's body is RewriteWith's output, in a
// buffer of exactly its size when it fits the pooled scratch buffer,
// and as before (its size plus rewriteSlack) when it does not.
func TestRewriteExactSize(t *testing.T) {
	d := Dispatcher{Buffers: &testBuffers{}}
	big := `{"model":"llama","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}]}`
	for _, raw := range []string{
		`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama","stream":true,"max_tokens":null,"messages":[]}`,
		big,
	} {
		b, err := request.ParseBody([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		c := request.Changes{Model: "meta/Llama-3.1-8B", InjectUsage: b.Stream, OutputCap: 77, CapField: request.MaxTokens}
		want := b.RewriteWith(nil, []byte(raw), c)
		got := d.rewrite(&b, []byte(raw), c)
		if !bytes.Equal(got, want) {
			t.Fatalf("rewrite = %.200s, want %.200s", got, want)
		}
		if len(raw) < 8<<10 && cap(got) != len(got) {
			t.Errorf("a small body's copy has cap %d for %d bytes", cap(got), len(got))
		}
		if len(raw) > 64<<10 && cap(got) < len(raw)+rewriteSlack {
			t.Errorf("a large body's copy has cap %d, under its size plus slack", cap(got))
		}
	}
}

// testBuffers lends 8 KiB scratch buffers, as the server's body pool does.
type testBuffers struct{ pool sync.Pool }

func (p *testBuffers) Get() *[]byte {
	if b, _ := p.pool.Get().(*[]byte); b != nil {
		return b
	}
	b := make([]byte, 0, 8<<10)
	return &b
}

func (p *testBuffers) Put(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		p.pool.Put(b)
	}
}
