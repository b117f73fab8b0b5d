package server

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// TestTooManyConnections: the refusal the listener writes at the cap is
// the too_many_connections error of errors.go, framed as a whole
// HTTP/1.1 answer byte for byte as the listener wrote it when it rendered
// the answer itself, and read back by an HTTP client as that error.
func TestTooManyConnections(t *testing.T) {
	const want = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 183\r\n\r\n" +
		`{"error":{"message":"this gateway replica holds its limit of 4096 open connections (max_connections); retry shortly","type":"server_error","param":null,"code":"too_many_connections"}}`
	got := TooManyConnections(4096)
	if string(got) != want {
		t.Fatalf("refusal:\n%q\nwant\n%q", got, want)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.ContentLength != int64(len(tooManyConnections(4096).JSON())) {
		t.Fatalf("read back: %d, close %v, length %d", resp.StatusCode, resp.Close, resp.ContentLength)
	}
}
