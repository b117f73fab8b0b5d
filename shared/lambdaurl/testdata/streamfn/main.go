// Command streamfn is a Lambda function for lambdaurl's tests. It relays the
// server-sent events of the URL in its "upstream" query parameter, writing
// and flushing each event as it arrives, the way the gateway relays a
// backend stream; with "panic=after" it panics after the first event.
package main

import (
	"bufio"
	"net/http"

	"github.com/llmgw/gateway/shared/lambdaurl"
)

func main() {
	lambdaurl.Start(http.HandlerFunc(relay), lambdaurl.Options{})
}

func relay(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, r.URL.Query().Get("upstream"), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		w.Write(sc.Bytes())
		w.Write([]byte("\n"))
		if len(sc.Bytes()) > 0 {
			continue
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if r.URL.Query().Get("panic") == "after" {
			panic("streamfn: panic after an event")
		}
	}
}
