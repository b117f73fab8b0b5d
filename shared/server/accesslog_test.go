package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/sse"
)

// slogAccessLog writes ex's line as the gateway once wrote it, through
// log/slog's JSON handler: the reference the fixed record must match field
// by field.
func slogAccessLog(w *bytes.Buffer, ex *exchange, end time.Time) {
	ms := msBetween
	keepalives, kaFirst, clientFirst := ex.firstBytes()
	stream := slog.Bool("stream", ex.stream)
	if !ex.streamKnown {
		stream = slog.Any("stream", nil)
	}
	slog.New(slog.NewJSONHandler(w, nil)).LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", ex.id), slog.String("method", ex.method), slog.String("path", ex.path),
		slog.String("tenant", ex.tenant), slog.String("tenant_name", ex.tenantName), slog.String("subject", ex.subject),
		slog.String("model", ex.model), stream, slog.String("pool", ex.pool), slog.String("endpoint", ex.Endpoint),
		slog.Int("priority", ex.Priority), slog.String("spill", ex.spill), slog.Int("attempts", ex.Attempts),
		slog.Int("status", ex.Status), slog.Int("upstream_status", ex.UpstreamStatus), slog.String("outcome", ex.Outcome),
		slog.String("error", ex.Detail), slog.String("dropped_fields", ex.dropped), slog.Int64("bytes", ex.Bytes), slog.Int64("events", ex.Events),
		slog.Int64("prompt_tokens", ex.Usage.PromptTokens), slog.Int64("completion_tokens", ex.Usage.CompletionTokens),
		slog.Int64("budget_reserved", ex.budget.Reserved()), slog.Int64("budget_charged", ex.budget.ChargedTokens()),
		slog.String("budget_settle", ex.budget.SettleState()), slog.String("cost", ex.budget.CostText()),
		slog.String("price_version", ex.budget.PriceVersion()), slog.Int64("output_cap", ex.budget.OutputCap()),
		slog.Float64("upstream_first_byte_ms", ms(ex.start, ex.UpstreamHeaders)),
		slog.Float64("client_first_byte_ms", ms(ex.start, clientFirst)),
		slog.Float64("client_first_event_ms", ms(ex.start, ex.ClientFirstEvent)),
		slog.Int("keepalives", keepalives), slog.Float64("first_keepalive_ms", ms(ex.start, kaFirst)),
		slog.Bool("failover_after_headers", ex.FailoverAfterHeaders),
		slog.Float64("added_ms", addedMs(&ex.logEntry, end)), slog.Float64("duration_ms", ms(ex.start, end)),
	)
}

// logField is one member of a logged line: its name, its JSON type and
// its value as written.
type logField struct {
	name, kind string
	raw        string
}

// logFields reads a line's members in order, failing on anything that is
// not one JSON object.
func logFields(t *testing.T, line []byte) []logField {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, line)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var fields []logField
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		kind := "string"
		switch c := v[0]; {
		case c == 'n':
			kind = "null"
		case c == 't' || c == 'f':
			kind = "bool"
		case c == '-' || c >= '0' && c <= '9':
			kind = "number"
		case c == '{' || c == '[':
			kind = "composite"
		}
		fields = append(fields, logField{name: k.(string), kind: kind, raw: string(v)})
	}
	if len(fields) != len(obj) {
		t.Fatalf("a member named twice: %s", line)
	}
	return fields
}

// TestAccessLogLineAsSlogWroteIt parses the fixed record's line for a
// request and checks every member slog's JSON handler wrote for the same
// request is there, in the same order, with the same type and value (the
// time aside: it is the clock's, and only its format is compared). Fields
// added since (a helper's new column) may follow, and are listed.
func TestAccessLogLineAsSlogWroteIt(t *testing.T) {
	start := time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	full := &exchange{logEntry: logEntry{
		id: "0123456789abcdef", start: start, method: "POST", path: "/v1/chat/completions",
		tenant: "contoso", tenantName: "Contoso \"R&D\" <lab>", subject: "user\n\t\x01é\u2028\xff",
		model: "gpt-4o", pool: "azure", spill: "upstream_rate_limited", stream: true, streamKnown: true,
		Result: dispatch.Result{Endpoint: "east", Priority: 1, Attempts: 2, Status: 200, UpstreamStatus: 200, Outcome: "ok",
			Detail: `endpoint west: x509: "bad" \ cert`, FailoverAfterHeaders: true, Bytes: 12345, Events: 130,
			Usage:     sse.Usage{PromptTokens: 17, CompletionTokens: 129},
			FirstSent: at(1234 * time.Microsecond), Sent: at(3 * time.Millisecond), UpstreamHeaders: at(7*time.Millisecond + 1),
			UpstreamFirst: at(9 * time.Millisecond), ClientFirst: at(8 * time.Millisecond), ClientFirstEvent: at(9*time.Millisecond + 77*time.Microsecond)},
	},
		budget: &billing.Reservation{Held: true, Granted: 4096, Charged: 146, Cap: 1000}}
	refused := &exchange{logEntry: logEntry{id: "fedcba9876543210", start: start, method: "GET", path: "/nope", tenant: UnknownTenant, Result: dispatch.Result{Status: 401, Outcome: "invalid_token"}}}
	tiny := &exchange{logEntry: logEntry{id: "x", start: start, method: "POST", path: "/v1/responses", streamKnown: true,
		Result: dispatch.Result{Status: 200, Outcome: "ok", ClientFirst: start.Add(time.Microsecond), FirstSent: start.Add(time.Microsecond)}}}
	cases := []struct {
		name string
		ex   *exchange
		end  time.Time
	}{
		{"stream with budget and failover", full, at(1500 * time.Millisecond)},
		{"refused before the body", refused, at(250 * time.Microsecond)},
		{"microseconds", tiny, at(3 * time.Microsecond)},
		{"a long request", full, at(36 * time.Hour)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var old, now bytes.Buffer
			slogAccessLog(&old, c.ex, c.end)
			s := New(Deps{AccessLog: &now, Log: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)), Now: func() time.Time { return c.end }})
			s.log(c.ex)
			if n := bytes.Count(now.Bytes(), []byte("\n")); n != 1 || !bytes.HasSuffix(now.Bytes(), []byte("\n")) {
				t.Fatalf("want one line ending in a newline, got %d:\n%s", n, now.Bytes())
			}
			want, got := logFields(t, old.Bytes()), logFields(t, now.Bytes())
			if len(got) < len(want) {
				t.Fatalf("%d members, slog wrote %d:\n got %s\nwant %s", len(got), len(want), now.Bytes(), old.Bytes())
			}
			for i, w := range want {
				g := got[i]
				if g.name != w.name || g.kind != w.kind {
					t.Fatalf("member %d is %s (%s), slog wrote %s (%s)", i, g.name, g.kind, w.name, w.kind)
				}
				if w.name == "time" {
					var ts string
					if err := json.Unmarshal([]byte(g.raw), &ts); err != nil {
						t.Fatal(err)
					}
					if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
						t.Errorf("time %s: %v", g.raw, err)
					}
					continue
				}
				if g.raw != w.raw {
					t.Errorf("%s = %s, slog wrote %s", w.name, g.raw, w.raw)
				}
			}
			for _, g := range got[len(want):] {
				t.Logf("added since: %s (%s)", g.name, g.kind)
			}
		})
	}
}

// TestAccessLogOff: a log above Info, or no AccessLog, writes nothing.
func TestAccessLogOff(t *testing.T) {
	var out bytes.Buffer
	ex := &exchange{logEntry: logEntry{id: "x", start: time.Now()}}
	warn := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	New(Deps{AccessLog: &out, Log: warn}).log(ex)
	New(Deps{}).log(ex)
	if out.Len() != 0 {
		t.Fatalf("wrote %q", out.String())
	}
}

// FuzzAccessLogValues checks the record's string and number encodings
// against slog's JSON handler for any value.
func FuzzAccessLogValues(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\x7f", "<&>", "\u2028\u2029", "\xff\xfe", "é😀"} {
		f.Add(s, 0.001)
	}
	f.Add("", 1e-7)
	f.Add("", 1e21)
	f.Add("", -123456.789)
	f.Fuzz(func(t *testing.T, s string, v float64) {
		var ref bytes.Buffer
		slog.New(slog.NewJSONHandler(&ref, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if len(a.Key) != 1 { // time, level, msg
				return slog.Attr{}
			}
			return a
		}})).Info("", "s", s, "f", v)
		l := logLine{b: []byte("{")}
		l.str("s", s)
		l.float("f", v)
		line := append(bytes.Replace(l.b, []byte("{,"), []byte("{"), 1), "}\n"...)
		if !strings.Contains(ref.String(), "!ERROR") && !bytes.Equal(line, ref.Bytes()) {
			t.Fatalf("got  %s\nslog %s", line, ref.Bytes())
		}
	})
}
