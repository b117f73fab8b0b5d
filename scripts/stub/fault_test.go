package stub

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Fault
	}{
		{"", Fault{}},
		{" , ", Fault{}},
		{"status=500", Fault{Status: 500}},
		{"status=429,retry_after=2", Fault{Status: 429, RetryAfter: 2 * time.Second}},
		{"status=503, retry_after=1500ms", Fault{Status: 503, RetryAfter: 1500 * time.Millisecond}},
		{"hang", Fault{Hang: true}},
		{"close", Fault{Close: true}},
		{"slow_headers=250ms,drop_after=5", Fault{SlowHeaders: 250 * time.Millisecond, DropAfter: 5}},
		{"drop_after=0", Fault{DropAfter: AfterHeaders}},
		{"error_after=3", Fault{ErrorAfter: 3}},
		{"error_after=0", Fault{ErrorAfter: AfterHeaders}},
		{"stall_after=2", Fault{StallAfter: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseFault(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("ParseFault(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			again, err := ParseFault(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip via %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseFaultErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"status", "status=200", "status=600", "status=abc", "retry_after=-1", "retry_after=soon",
		"hang=1", "close=yes", "slow_headers=5", "slow_headers=-1s", "drop_after=-2", "drop_after=x",
		"error_after=", "stall_after=1.5", "explode", "status=500,bogus",
	} {
		t.Run(in, func(t *testing.T) {
			if f, err := ParseFault(in); !errors.Is(err, ErrBadFault) {
				t.Fatalf("ParseFault(%q) = %+v, %v; want ErrBadFault", in, f, err)
			}
		})
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"status=429,retry_after=2", "hang", "close", "slow_headers=1s,drop_after=0", "error_after=3,stall_after=1", "=", ",,="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseFault(s)
		if err != nil {
			if !errors.Is(err, ErrBadFault) {
				t.Fatalf("error %v does not wrap ErrBadFault", err)
			}
			return
		}
		again, err := ParseFault(got.String())
		if err != nil || again != got {
			t.Fatalf("round trip of %q via %q: %+v, %v; want %+v", s, got.String(), again, err, got)
		}
	})
}

// faultWays runs a fault both ways an end-to-end test can set it.
func faultWays(t *testing.T, opts Options, f Fault, run func(t *testing.T, st *Server, post func(ctx context.Context, path, body string) (*http.Response, error))) {
	t.Run("header", func(t *testing.T) {
		t.Parallel()
		st, ts := start(t, opts)
		run(t, st, func(ctx context.Context, path, body string) (*http.Response, error) {
			return post(t, ctx, ts, path, body, FaultHeader+": "+f.String())
		})
	})
	t.Run("SetFault", func(t *testing.T) {
		t.Parallel()
		st, ts := start(t, opts)
		st.SetFault(f)
		run(t, st, func(ctx context.Context, path, body string) (*http.Response, error) {
			return post(t, ctx, ts, path, body)
		})
	})
}

func TestFaultStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fault      Fault
		retryAfter string
		typ        string
	}{
		{"500", Fault{Status: 500}, "", "server_error"},
		{"429 retry after", Fault{Status: 429, RetryAfter: 2 * time.Second}, "2", "requests"},
		{"503 retry after rounded up", Fault{Status: 503, RetryAfter: 1500 * time.Millisecond}, "2", "server_error"},
		{"400", Fault{Status: 400}, "", "invalid_request_error"},
	}
	for _, tc := range tests {
		for _, body := range []string{chatBody, `{"model":"m"}`} {
			t.Run(tc.name+"/stream="+strconv.FormatBool(strings.Contains(body, "stream")), func(t *testing.T) {
				t.Parallel()
				faultWays(t, fast, tc.fault, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
					resp, err := post(context.Background(), "/v1/chat/completions", body)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != tc.fault.Status {
						t.Fatalf("status %d, want %d", resp.StatusCode, tc.fault.Status)
					}
					if got := resp.Header.Get("Retry-After"); got != tc.retryAfter {
						t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
					}
					if e := errorBody(t, readAll(t, resp)); e.Type != tc.typ {
						t.Fatalf("error type %q, want %q", e.Type, tc.typ)
					}
					if st.Stats().Streams != 0 {
						t.Fatal("a stream started")
					}
				})
			})
		}
	}
}

func TestFaultHang(t *testing.T) {
	t.Parallel()
	faultWays(t, fast, Fault{Hang: true}, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			resp, err := post(ctx, "/v1/chat/completions", chatBody)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		waitFor(t, "the request to arrive", func() bool { return st.Stats().Requests == 1 })
		select {
		case err := <-done:
			t.Fatalf("answered while hanging: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

func TestFaultHangReleasedByClose(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	st.SetFault(Fault{Hang: true})
	done := make(chan error, 1)
	go func() {
		resp, err := post(t, context.Background(), ts, "/v1/chat/completions", chatBody)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "the request to arrive", func() bool { return st.Stats().Requests == 1 })
	st.Close()
	if err := <-done; err == nil {
		t.Fatal("got a response after Close; want a transport error")
	}
}

func TestFaultDrop(t *testing.T) {
	t.Parallel()
	for _, n := range []int{AfterHeaders, 1, 3} {
		t.Run("after "+strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			faultWays(t, fast, Fault{DropAfter: n}, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
				resp, err := post(context.Background(), "/v1/chat/completions", chatBody)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				data, err := newSSE(resp.Body).all()
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("read error %v, want io.ErrUnexpectedEOF", err)
				}
				if want := max(n, 0); len(data) != want {
					t.Fatalf("%d events before the drop, want %d", len(data), want)
				}
				waitFor(t, "stream end", func() bool { return st.Stats().ActiveStreams == 0 })
				if s := st.Stats(); s.Canceled != 0 || s.Completed != 0 {
					t.Fatalf("Stats %+v: a drop is neither canceled nor completed", s)
				}
			})
		})
	}
}

func TestFaultDropNonStreaming(t *testing.T) {
	t.Parallel()
	faultWays(t, fast, Fault{DropAfter: 1}, func(t *testing.T, _ *Server, post func(context.Context, string, string) (*http.Response, error)) {
		resp, err := post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) == 0 {
			t.Fatalf("read %d bytes, %v; want part of the body, then io.ErrUnexpectedEOF", len(b), err)
		}
	})
}

func TestFaultErrorAfter(t *testing.T) {
	t.Parallel()
	for _, n := range []int{AfterHeaders, 2} {
		t.Run("after "+strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			faultWays(t, fast, Fault{ErrorAfter: n}, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
				resp, err := post(context.Background(), "/v1/chat/completions", chatBody)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				data, err := newSSE(resp.Body).all()
				if err != nil {
					t.Fatalf("want a clean end after the error event: %v", err)
				}
				if want := max(n, 0) + 1; len(data) != want {
					t.Fatalf("%d events, want %d: %q", len(data), want, data)
				}
				errorBody(t, []byte(data[len(data)-1]))
				waitFor(t, "stream end", func() bool { return st.Stats().ActiveStreams == 0 })
				if s := st.Stats(); s.Completed != 0 || s.Canceled != 0 {
					t.Fatalf("Stats %+v", s)
				}
			})
		})
	}
}

func TestFaultStall(t *testing.T) {
	t.Parallel()
	faultWays(t, fast, Fault{StallAfter: 2}, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := post(ctx, "/v1/chat/completions", chatBody)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sse := newSSE(resp.Body)
		for range 2 {
			if _, err := sse.next(); err != nil {
				t.Fatal(err)
			}
		}
		third := make(chan error, 1)
		go func() { _, err := sse.next(); third <- err }()
		select {
		case err := <-third:
			t.Fatalf("a third event (or end: %v) while stalled", err)
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		if err := <-third; err == nil {
			t.Fatal("read succeeded after cancel")
		}
		waitFor(t, "stall counted as canceled", func() bool { return st.Stats().Canceled == 1 })
		if got := st.Emitted(); got != 2 {
			t.Fatalf("Emitted %d, want 2", got)
		}
	})
}

func TestFaultClose(t *testing.T) {
	t.Parallel()
	faultWays(t, fast, Fault{Close: true}, func(t *testing.T, st *Server, post func(context.Context, string, string) (*http.Response, error)) {
		resp, err := post(context.Background(), "/v1/chat/completions", chatBody)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got status %d; want a transport error", resp.StatusCode)
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v; want a connection error", err)
		}
		if got := st.LastRequest(); got.Path != "/v1/chat/completions" || string(got.Body) != chatBody {
			t.Fatalf("request not recorded before the close: %+v", got)
		}
	})
}

// TestFaultSlowHeaders checks a lower bound only: no header before the delay.
func TestFaultSlowHeaders(t *testing.T) {
	t.Parallel()
	const delay = 80 * time.Millisecond
	faultWays(t, fast, Fault{SlowHeaders: delay}, func(t *testing.T, _ *Server, post func(context.Context, string, string) (*http.Response, error)) {
		sent := time.Now()
		resp, err := post(context.Background(), "/v1/chat/completions", chatBody)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if since := time.Since(sent); since < delay {
			t.Fatalf("headers after %v, want >= %v", since, delay)
		}
		checkStream(t, resp, true, false, 5, "gpt-4o-mini", "stop", max(len(chatBody)/4, 1))
	})
}

func TestFaultTimesAndHeaderPrecedence(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	st.SetFault(Fault{Status: 503, Times: 2})
	for i, want := range []int{503, 503, 200, 200} {
		resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`)
		readAll(t, resp)
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	st.SetFault(Fault{Status: 500})
	if resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`, FaultHeader+": status=429"); resp.StatusCode != 429 {
		t.Fatalf("header fault: status %d, want 429", resp.StatusCode)
	}
	if resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`, FaultHeader+":"); resp.StatusCode != 200 {
		t.Fatalf("empty header fault: status %d, want 200 (it overrides SetFault)", resp.StatusCode)
	}
	if resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`, FaultHeader+": explode"); resp.StatusCode != 400 {
		t.Fatalf("bad header fault: status %d, want 400", resp.StatusCode)
	}
	st.SetFault(Fault{})
	if resp := mustPost(t, ts, "/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("healed: status %d, want 200", resp.StatusCode)
	}
}
