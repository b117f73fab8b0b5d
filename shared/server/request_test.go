package server

import (
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/dispatch"
)

// TestAddedMs: added_ms is the gateway's own time and never negative. A
// stream's headers reach the client before its first event: measured from
// the backend's first event to those headers, 1 stream in 6 was once
// negative.
func TestAddedMs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		rec  logEntry
		end  time.Time
		want float64
	}{
		{"stream: headers before the first event",
			logEntry{start: at(0), Result: dispatch.Result{FirstSent: at(2), Sent: at(2), UpstreamHeaders: at(10), ClientFirst: at(11), UpstreamFirst: at(40), ClientFirstEvent: at(41)}},
			at(100), 2 + 1},
		{"stream: first event written in the same millisecond",
			logEntry{start: at(0), Result: dispatch.Result{FirstSent: at(1), Sent: at(1), UpstreamHeaders: at(5), ClientFirst: at(5), UpstreamFirst: at(30), ClientFirstEvent: at(30)}},
			at(100), 1},
		{"stream: the client left before the first event",
			logEntry{start: at(0), Result: dispatch.Result{FirstSent: at(3), Sent: at(3), UpstreamHeaders: at(5), ClientFirst: at(5), UpstreamFirst: at(30)}},
			at(100), 3},
		{"json",
			logEntry{start: at(0), Result: dispatch.Result{FirstSent: at(2), Sent: at(2), UpstreamHeaders: at(50), ClientFirst: at(52)}},
			at(60), 2 + 2},
		{"failover: the first endpoint's time is the backend's",
			logEntry{start: at(0), Result: dispatch.Result{FirstSent: at(2), Sent: at(500), UpstreamHeaders: at(510), ClientFirst: at(511)}},
			at(600), 2 + 1},
		{"never sent: all the gateway's",
			logEntry{start: at(0)},
			at(7), 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := addedMs(&tt.rec, tt.end); got != tt.want {
				t.Fatalf("added_ms = %v, want %v", got, tt.want)
			}
		})
	}
}
