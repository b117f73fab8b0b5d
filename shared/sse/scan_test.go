package sse

import (
	"testing"
)

func TestEventEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		atEOF bool
		end   int
		ok    bool
	}{
		{name: "empty", in: "", end: 0, ok: false},
		{name: "LF event", in: "data: x\n\nrest", end: 9, ok: true},
		{name: "CRLF event", in: "data: x\r\n\r\nrest", end: 11, ok: true},
		{name: "CR event", in: "data: x\r\rrest", end: 9, ok: true},
		{name: "CR then CRLF", in: "data: x\r\r\nrest", end: 10, ok: true},
		{name: "LF then CRLF", in: "data: x\n\r\nrest", end: 10, ok: true},
		{name: "single line end is not an event", in: "data: x\n", ok: false},
		{name: "single line end at EOF is not an event", in: "data: x\n", atEOF: true, ok: false},
		{name: "trailing CR may be half a CRLF", in: "data: x\r\r", ok: false},
		{name: "trailing CR at EOF ends the event", in: "data: x\r\r", atEOF: true, end: 9, ok: true},
		{name: "trailing CR after LF", in: "data: x\n\r", ok: false},
		{name: "trailing CR after LF at EOF", in: "data: x\n\r", atEOF: true, end: 9, ok: true},
		{name: "lone CR in the middle is a line end", in: "data: x\ry\n\n", end: 11, ok: true},
		{name: "leading blank line is an empty event", in: "\ndata: x\n\n", end: 1, ok: true},
		{name: "leading CRLF blank line", in: "\r\ndata: x\n\n", end: 2, ok: true},
		{name: "multi-line event", in: "event: e\nid: 1\ndata: a\ndata: b\n\n", end: 32, ok: true},
		{name: "comment", in: ": ping\n\ndata: x\n\n", end: 8, ok: true},
		{name: "no line end", in: "data: xxxxxxxx", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			end, ok := EventEnd([]byte(tt.in), tt.atEOF)
			if end != tt.end || ok != tt.ok {
				t.Errorf("EventEnd(%q, %v) = %d, %v; want %d, %v", tt.in, tt.atEOF, end, ok, tt.end, tt.ok)
			}
			rend, rok := refEventEnd([]byte(tt.in), tt.atEOF)
			if rend != tt.end || rok != tt.ok {
				t.Errorf("refEventEnd(%q, %v) = %d, %v; want %d, %v (oracle disagrees)", tt.in, tt.atEOF, rend, rok, tt.end, tt.ok)
			}
		})
	}
}

// TestScanEventResume checks that resuming a scan on a longer buffer gives
// the same boundary as scanning the whole buffer, for every split point.
func TestScanEventResume(t *testing.T) {
	t.Parallel()
	for name, stream := range shapes() {
		if len(stream) > 1<<12 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkResume(t, stream, true)
			checkResume(t, stream, false)
		})
	}
}

func checkResume(t *testing.T, b []byte, atEOF bool) {
	t.Helper()
	want, wantOK := EventEnd(b, atEOF)
	for k := 0; k <= len(b); k++ {
		end, ls, pos, ok := scanEvent(b[:k], 0, 0, false)
		if !ok {
			if ls > pos || pos > k {
				t.Fatalf("split %d: resume state lineStart=%d pos=%d out of range", k, ls, pos)
			}
			end, _, _, ok = scanEvent(b, ls, pos, atEOF)
		}
		if end != want || ok != wantOK {
			t.Fatalf("split %d: got %d, %v; want %d, %v", k, end, ok, want, wantOK)
		}
	}
}

func FuzzEventEnd(f *testing.F) {
	for _, s := range shapes() {
		if len(s) < 1<<12 {
			f.Add(s, true, uint16(len(s)/2))
		}
	}
	for _, s := range []string{"", "\r", "\n", "\r\n", "\r\r", "\n\r", "a\r", "a\r\r", "a\r\n\r", "a\n\r\n", "\r\n\r\n", "data: x\r"} {
		f.Add([]byte(s), false, uint16(1))
		f.Add([]byte(s), true, uint16(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, atEOF bool, split uint16) {
		end, ok := EventEnd(b, atEOF)
		rend, rok := refEventEnd(b, atEOF)
		if end != rend || ok != rok {
			t.Fatalf("EventEnd(%q, %v) = %d, %v; oracle says %d, %v", b, atEOF, end, ok, rend, rok)
		}
		if ok && (end <= 0 || end > len(b)) {
			t.Fatalf("end %d out of range (len %d)", end, len(b))
		}
		k := int(split) % (len(b) + 1)
		pend, ls, pos, pok := scanEvent(b[:k], 0, 0, false)
		if !pok {
			pend, _, _, pok = scanEvent(b, ls, pos, atEOF)
		}
		if pend != end || pok != ok {
			t.Fatalf("resumed at %d: got %d, %v; want %d, %v", k, pend, pok, end, ok)
		}
	})
}

func BenchmarkEventEnd(b *testing.B) {
	cases := map[string][]byte{
		"openai chunk": []byte(chunkContent),
		"CRLF chunk":   []byte("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n"),
		"multi-line":   []byte("event: message\nid: 42\ndata: {\"a\":\ndata: 1}\n\n"),
	}
	for name, ev := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev)))
			for b.Loop() {
				if _, ok := EventEnd(ev, false); !ok {
					b.Fatal("no event")
				}
			}
		})
	}
}
