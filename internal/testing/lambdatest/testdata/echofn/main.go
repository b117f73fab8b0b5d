// Command echofn is a Lambda function for lambdatest's own tests: it
// answers every Function URL request with a JSON description of the
// request it saw, after optional streamed events.
//
// Query parameters: status=N sets the status; cookie=V adds a Set-Cookie;
// header=K:V adds a response header (repeatable); events=N streams N SSE
// events, each flushed, before the JSON; panic=before|after panics before
// or after the first flushed event.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/lambdaurl"
)

// Echo is what echofn reports about the request it was given.
type Echo struct {
	Method        string              `json:"method"`
	RequestURI    string              `json:"requestURI"`
	Path          string              `json:"path"`
	RawQuery      string              `json:"rawQuery"`
	Host          string              `json:"host"`
	RemoteAddr    string              `json:"remoteAddr"`
	Header        map[string][]string `json:"header"`
	Body          string              `json:"body"`
	ContentLength int64               `json:"contentLength"`
	DeadlineLeft  string              `json:"deadlineLeft"`
}

func main() {
	lambdaurl.Start(http.HandlerFunc(serve), lambdaurl.Options{})
}

func serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	body, _ := io.ReadAll(r.Body)
	echo := Echo{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Host: r.Host, RemoteAddr: r.RemoteAddr, Header: r.Header, Body: string(body),
		ContentLength: r.ContentLength,
	}
	if d, ok := r.Context().Deadline(); ok {
		echo.DeadlineLeft = time.Until(d).Round(time.Second).String()
	}
	for _, c := range q["cookie"] {
		w.Header().Add("Set-Cookie", c)
	}
	for _, kv := range q["header"] {
		k, v, _ := strings.Cut(kv, ":")
		w.Header().Add(k, v)
	}
	if q.Get("panic") == "before" {
		panic("echofn: panic before the headers")
	}
	n, _ := strconv.Atoi(q.Get("events"))
	if n > 0 {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if s, err := strconv.Atoi(q.Get("status")); err == nil {
		w.WriteHeader(s)
	}
	rc := http.NewResponseController(w)
	for i := range n {
		fmt.Fprintf(w, "data: event %d\n\n", i)
		if err := rc.Flush(); err != nil {
			return
		}
		if q.Get("panic") == "after" {
			panic("echofn: panic after the first event")
		}
	}
	if n > 0 {
		w.Write([]byte("data: "))
	}
	_ = json.NewEncoder(w).Encode(echo)
}
