package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCallersDoNotSetLogBill: what a caller chooses is echoed in the
// access log, and in a 404's message, cut to a few hundred bytes and
// marked: an anonymous GET of a 30,000-byte path, a request naming a
// 900 KB model no pool serves. Before, both went into the log whole (a
// 30 KB line per anonymous 404, a 900 KB line per such request), and the
// 404 echoed the whole path. The controls: a short path and a served
// model are logged whole.
func TestCallersDoNotSetLogBill(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{})
	tok := g.token("contoso")
	const bound = 400 // maxEcho and its mark, with room

	long := "/" + strings.Repeat("p", 30000)
	resp, err := http.Get(g.URL + long)
	if err != nil {
		t.Fatal(err)
	}
	e := openAIError(t, resp, http.StatusNotFound, "unknown_url")
	msg, _ := e["message"].(string)
	if len(msg) > bound+100 || !strings.Contains(msg, "…(truncated)") {
		t.Errorf("404 message: %d bytes, want the path cut and marked", len(msg))
	}
	path, _ := g.accessLog(resp.Header.Get("X-Request-Id"))["path"].(string)
	if len(path) > bound || !strings.HasSuffix(path, "…(truncated)") || !strings.HasPrefix(path, "/ppp") || !utf8.ValidString(path) {
		t.Errorf("logged path: %d bytes, want it cut and marked", len(path))
	}

	model := strings.Repeat("m", 900<<10)
	resp = g.post("/v1/chat/completions", tok, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: status %d", resp.StatusCode)
	}
	logged, _ := g.accessLog(resp.Header.Get("X-Request-Id"))["model"].(string)
	if len(logged) > bound || !strings.HasSuffix(logged, "…(truncated)") {
		t.Errorf("logged model: %d bytes, want it cut and marked", len(logged))
	}

	t.Run("control: served model and short path whole", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, chatBody)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l := g.accessLog(resp.Header.Get("X-Request-Id"))
		if resp.StatusCode != http.StatusOK || l["model"] != "llama" || l["path"] != "/v1/chat/completions" {
			t.Errorf("status %d, logged model %v path %v", resp.StatusCode, l["model"], l["path"])
		}
	})
}
