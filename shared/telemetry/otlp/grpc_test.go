package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// grpcServer is an h2c server that answers each call as answers says (then
// OK) and keeps the messages it got, unframed and gunzipped.
func grpcServer(t *testing.T, answers ...func(w http.ResponseWriter)) (url string, got func() [][]byte) {
	t.Helper()
	var mu sync.Mutex
	var msgs [][]byte
	n := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" || r.Header.Get("Te") != "trailers" || r.URL.Path != grpcTracesPath {
			http.Error(w, "not a gRPC call: "+r.Proto+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if len(b) < 5 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
			http.Error(w, "bad frame", http.StatusBadRequest)
			return
		}
		msg := b[5:]
		if b[0] == 1 {
			z, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil || r.Header.Get("Grpc-Encoding") != "gzip" {
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			msg, _ = io.ReadAll(z)
		}
		mu.Lock()
		msgs = append(msgs, msg)
		i := n
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		if i < len(answers) {
			answers[i](w)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", "0")
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, func() [][]byte { mu.Lock(); defer mu.Unlock(); return msgs }
}

// grpcStatus answers a call with code in the trailers (or, trailersOnly,
// in the headers, as a server does that fails before any message).
func grpcStatus(code, msg string, trailersOnly bool) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if trailersOnly {
			w.Header().Del("Trailer")
			w.Header().Set("Grpc-Status", code)
			w.Header().Set("Grpc-Message", msg)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.Header().Set("Grpc-Status", code)
		w.Header().Set("Grpc-Message", msg)
	}
}

func TestPostGRPC(t *testing.T) {
	t.Parallel()
	partial := func(w http.ResponseWriter) {
		a := partialAnswer(3, "late")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(grpcFrame(new(bytes.Buffer), a, false))
		w.Header().Set("Grpc-Status", "0")
	}
	for _, c := range []struct {
		name    string
		gzip    bool
		answers []func(http.ResponseWriter)
		calls   int
		err     string
	}{
		{name: "OK", calls: 1},
		{name: "gzip", gzip: true, calls: 1},
		{name: "UNAVAILABLE then OK", answers: []func(http.ResponseWriter){grpcStatus("14", "agent%20starting", false)}, calls: 2},
		{name: "trailers-only DEADLINE_EXCEEDED then OK", answers: []func(http.ResponseWriter){grpcStatus("4", "", true)}, calls: 2},
		{name: "INVALID_ARGUMENT is final", answers: []func(http.ResponseWriter){grpcStatus("3", "bad%20metric", false)}, calls: 1, err: "gRPC status 3 from"},
		{name: "HTTP 503 then OK", answers: []func(http.ResponseWriter){func(w http.ResponseWriter) { w.WriteHeader(503) }}, calls: 2},
		{name: "partial success", answers: []func(http.ResponseWriter){partial}, calls: 1, err: "partial success: 3 rejected: late"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base, got := grpcServer(t, c.answers...)
			hc, err := httpClient(time.Second, TLSFiles{}, true)
			if err != nil {
				t.Fatal(err)
			}
			p := newPoster(base+grpcTracesPath, nil, c.gzip, true, hc)
			p.backoff = time.Millisecond
			body := []byte("\x0a\x02\x08\x01")
			err = p.send(context.Background(), body)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("err %v, want %q", err, c.err)
			}
			if strings.Contains(c.err, "gRPC status") && !errors.Is(err, errGRPCStatus) {
				t.Fatalf("err %v is not a gRPC status", err)
			}
			msgs := got()
			if len(msgs) != c.calls {
				t.Fatalf("%d calls, want %d", len(msgs), c.calls)
			}
			for i, m := range msgs {
				if !bytes.Equal(m, body) {
					t.Errorf("call %d: message %q", i, m)
				}
			}
		})
	}
}
