package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// cuttingServer answers as the stub does, except that the first cuts
// streams to arrive end after one event with the connection closed, as
// the floor's rare cut does. (One cut, not several: a request sent again
// arrives after the one cut, but it might arrive before others that
// would be cut, and so be cut twice.)
type cuttingServer struct {
	cuts atomic.Int64 // streams still to cut
}

func (s *cuttingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		fmt.Fprint(w, `{"choices":[]}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"choices\":[],\"stub_emit_ns\":%d}\n\n", time.Now().UnixNano())
	w.(http.Flusher).Flush()
	if s.cuts.Add(-1) >= 0 {
		panic(http.ErrAbortHandler) // the connection is closed mid-stream
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestWarmSendsAFailureAgain: a warm-up with a stream cut once goes
// through, and says so; one whose every stream is cut fails
// the bench with the error named.
func TestWarmSendsAFailureAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cuts    int64
		wantErr string // "" = warm-up passes
		wantLog string
	}{
		{"none cut", 0, "", ""},
		{"one cut", 1, "", "warm-up of floor: truncated; sent again"},
		{"every try cut", 1 << 20, "warm-up of floor: truncated, twice", "sent again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s cuttingServer
			s.cuts.Store(tc.cuts)
			srv := httptest.NewServer(&s)
			t.Cleanup(srv.Close)
			tgt := &target{name: "floor", base: srv.URL, token: "t", client: newClient(warmRequests)}
			t.Cleanup(tgt.close)
			var log syncbuf.Buffer
			b := &bench{log: &log, began: time.Now()}
			err := b.warm(context.Background(), tgt)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("warm: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("warm: %v, want %q", err, tc.wantErr)
			}
			got := log.String()
			if tc.wantLog == "" && got != "" || !strings.Contains(got, tc.wantLog) {
				t.Errorf("log:\n%s\nwant it to hold %q", got, tc.wantLog)
			}
			if n := strings.Count(got, "sent again"); tc.cuts > 0 && tc.cuts < warmRequests && n != int(tc.cuts) {
				t.Errorf("%d requests sent again, want %d", n, tc.cuts)
			}
		})
	}
}
