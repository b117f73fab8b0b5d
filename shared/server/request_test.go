package server

import (
	"testing"
	"time"
)

// TestAddedMs: added_ms is the gateway's own time and never negative. A
// stream's headers reach the client before its first event: measured from
// the backend's first event to those headers, 1 stream in 6 was negative
// before issue 22.
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
			logEntry{start: at(0), firstSent: at(2), sent: at(2), upstreamHeaders: at(10), clientFirst: at(11), upstreamFirst: at(40), clientFirstEvent: at(41)},
			at(100), 2 + 1},
		{"stream: first event written in the same millisecond",
			logEntry{start: at(0), firstSent: at(1), sent: at(1), upstreamHeaders: at(5), clientFirst: at(5), upstreamFirst: at(30), clientFirstEvent: at(30)},
			at(100), 1},
		{"stream: the client left before the first event",
			logEntry{start: at(0), firstSent: at(3), sent: at(3), upstreamHeaders: at(5), clientFirst: at(5), upstreamFirst: at(30)},
			at(100), 3},
		{"json",
			logEntry{start: at(0), firstSent: at(2), sent: at(2), upstreamHeaders: at(50), clientFirst: at(52)},
			at(60), 2 + 2},
		{"failover: the first endpoint's time is the backend's",
			logEntry{start: at(0), firstSent: at(2), sent: at(500), upstreamHeaders: at(510), clientFirst: at(511)},
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
