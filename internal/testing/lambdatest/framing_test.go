package lambdatest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/aws/aws-lambda-go/events"
)

const nuls = "\x00\x00\x00\x00\x00\x00\x00\x00"

func TestParseStreamingResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     *Prelude
		wantBody string
		wantErr  bool
	}{
		{
			name:     "full",
			in:       `{"statusCode":201,"headers":{"Content-Type":"text/event-stream"},"cookies":["a=1"]}` + nuls + "data: x\n\n",
			want:     &Prelude{StatusCode: 201, Headers: map[string]string{"Content-Type": "text/event-stream"}, Cookies: []string{"a=1"}},
			wantBody: "data: x\n\n",
		},
		{
			name: "empty body",
			in:   `{"statusCode":204}` + nuls,
			want: &Prelude{StatusCode: 204},
		},
		{
			name:     "NULs in the body are body",
			in:       `{"statusCode":200}` + nuls + "\x00a" + nuls,
			want:     &Prelude{StatusCode: 200},
			wantBody: "\x00a" + nuls,
		},
		{name: "no delimiter", in: `{"statusCode":200}`, wantErr: true},
		{name: "seven NULs then data", in: `{"statusCode":200}` + nuls[:7] + "x", wantErr: true},
		{name: "bad json", in: `{"statusCode":` + nuls, wantErr: true},
		{name: "unknown field", in: `{"statusCode":200,"body":"x"}` + nuls, wantErr: true},
		{name: "two objects", in: `{"statusCode":200}{}` + nuls, wantErr: true},
		{name: "oversized", in: `{"headers":{"a":"` + strings.Repeat("x", maxPrelude) + `"}}` + nuls, wantErr: true},
		{name: "emulator error json", in: `{"errorMessage":"boom","errorType":"PanicError"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// One byte per read: the parser must not depend on read sizes.
			p, body, err := ParseStreamingResponse(iotest.OneByteReader(strings.NewReader(tt.in)))
			if tt.wantErr {
				if !errors.Is(err, ErrNoPrelude) {
					t.Errorf("err = %v, want ErrNoPrelude", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p, tt.want) {
				t.Errorf("prelude = %+v, want %+v", p, tt.want)
			}
			b, err := io.ReadAll(body)
			if err != nil || string(b) != tt.wantBody {
				t.Errorf("body = %q, %v; want %q", b, err, tt.wantBody)
			}
		})
	}
}

func TestPreludeHeader(t *testing.T) {
	t.Parallel()
	p := Prelude{StatusCode: 200, Headers: map[string]string{"content-type": "text/plain", "X-A": "1"}, Cookies: []string{"a=1", "b=2"}}
	h := p.Header()
	if h.Get("Content-Type") != "text/plain" || h.Get("X-A") != "1" || !slices.Equal(h.Values("Set-Cookie"), []string{"a=1", "b=2"}) {
		t.Errorf("Header() = %v", h)
	}
}

func FuzzParseStreamingResponse(f *testing.F) {
	f.Add([]byte(`{"statusCode":200,"headers":{"a":"b"}}` + nuls + "body"))
	f.Add([]byte(`{"statusCode":200}` + nuls[:7]))
	f.Add([]byte(nuls))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, body, err := ParseStreamingResponse(bytes.NewReader(in))
		if err != nil {
			if p != nil || body != nil {
				t.Fatal("results with an error")
			}
			return
		}
		rest, _ := io.ReadAll(body)
		i := bytes.Index(in, []byte(nuls))
		if i < 0 || !bytes.Equal(rest, in[i+8:]) {
			t.Fatalf("body %q is not what follows the first eight NULs of %q", rest, in)
		}
	})
}

func TestURLEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   func() *http.Request
		check func(t *testing.T, ev events.LambdaFunctionURLRequest)
	}{
		{
			name: "headers lower-cased and joined, cookies split, host",
			req: func() *http.Request {
				r, _ := http.NewRequest("POST", "https://fn.example/v1/x%2Fy?a=1&a=2&b=%20", strings.NewReader(`{"k":1}`))
				r.Header.Add("X-Multi", "1")
				r.Header.Add("X-Multi", "2")
				r.Header.Add("Cookie", "s=1; t=2")
				r.RemoteAddr = "198.51.100.3:5555"
				return r
			},
			check: func(t *testing.T, ev events.LambdaFunctionURLRequest) {
				if ev.RawPath != "/v1/x%2Fy" || ev.RawQueryString != "a=1&a=2&b=%20" || ev.RequestContext.HTTP.Method != "POST" {
					t.Errorf("path %q query %q method %q", ev.RawPath, ev.RawQueryString, ev.RequestContext.HTTP.Method)
				}
				if ev.Headers["x-multi"] != "1,2" || ev.Headers["host"] != "fn.example" || ev.Headers["cookie"] != "" {
					t.Errorf("headers = %v", ev.Headers)
				}
				if !slices.Equal(ev.Cookies, []string{"s=1", "t=2"}) {
					t.Errorf("cookies = %q", ev.Cookies)
				}
				if ev.QueryStringParameters["a"] != "1,2" || ev.QueryStringParameters["b"] != " " {
					t.Errorf("query parameters = %v", ev.QueryStringParameters)
				}
				if ev.RequestContext.HTTP.SourceIP != "198.51.100.3" || ev.RequestContext.DomainName != "fn.example" {
					t.Errorf("context = %+v", ev.RequestContext)
				}
				if ev.Body != `{"k":1}` || ev.IsBase64Encoded || ev.Version != "2.0" {
					t.Errorf("body %q base64 %v version %q", ev.Body, ev.IsBase64Encoded, ev.Version)
				}
			},
		},
		{
			name: "binary body base64",
			req: func() *http.Request {
				r, _ := http.NewRequest("PUT", "http://h/", bytes.NewReader([]byte{0xff, 0, 1}))
				return r
			},
			check: func(t *testing.T, ev events.LambdaFunctionURLRequest) {
				b, err := base64.StdEncoding.DecodeString(ev.Body)
				if !ev.IsBase64Encoded || err != nil || !bytes.Equal(b, []byte{0xff, 0, 1}) {
					t.Errorf("body %q base64 %v", ev.Body, ev.IsBase64Encoded)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := URLEvent(tt.req())
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, ev)
		})
	}
}
