package server

// One table of metering attacks, run against every billed row of the
// operations table, streamed and not, in strict and in estimate mode. A
// backend double speaks each row's shape (chat and completions chunks,
// Responses and Messages named events) and misbehaves as the attack says;
// the tenant's charge is read from the ledger's settle. A new operation
// runs them all once its shape has a writer below.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// attack is one way a client or backend tries to bend the bill.
type attack struct {
	name string
	// stream: the attack needs a stream (a JSON answer has no events to
	// leave between or to floor).
	stream bool
	// events is the token events the backend sends; report the output
	// it reports in its bill.
	events int
	report int64
	// hold: after the events the backend sends no bill and waits for the
	// client to go.
	hold bool
	// leaveAfter: the client closes after this many token events (0:
	// reads the whole answer).
	leaveAfter int
	// clientCap is the output cap the client asks for.
	clientCap int
	// decoys: the answer carries usage-shaped objects outside the bill's
	// place (tool input, text, metadata) saying 0.
	decoys bool
	// exact: the charge must be the backend's bill exactly.
	exact bool
	// noUsage: the bill's place holds no usage (null, or no member);
	// untrusted: the bill holds a count that cannot be true.
	noUsage, untrusted bool
	// part names a body attack (bodyAttacks): the request carries content
	// the prompt bound once missed, in the row's spelling, and the
	// backend bills its prompt honestly. The charge must be the bill and,
	// in strict mode, within the reservation (the bound held).
	part string
	// storeFails: the budget's store fails the settle (it went away
	// between reserve and settle); the ledger must replay it once the
	// store answers, so the tenant pays the bill, not nothing and not
	// the reservation.
	storeFails bool
	// na says why a row cannot run the attack ("": it can), so that a
	// row that cannot pass one says so in the table.
	na func(op request.Operation) string
	// prompt is the prompt tokens the backend bills (attackPrompt when
	// zero); runAttack sets it from the body attack.
	prompt int64
}

// promptTokens is the prompt the backend bills.
func (at attack) promptTokens() int64 {
	if at.prompt > 0 {
		return at.prompt
	}
	return attackPrompt
}

// noParts: a row whose prompt is a plain string has no typed parts.
func noParts(op request.Operation) string {
	if op == request.Completions {
		return "legacy completions' prompt is a string or token ids: it has no typed parts"
	}
	return ""
}

// onlySources: only the Messages API has a document whose source is text.
func onlySources(op request.Operation) string {
	if !op.Prompt().Sources {
		return "its API has no text document: a file part is media, at media_tokens and Unbounded"
	}
	return ""
}

// The attacks, the first three at the sizes they were reported with: the
// client that leaves after 449 tokens, the backend that reports 1 output
// for 1,000 deltas, the backend that ignores a cap of 50 and sends 1,004
// events.
var meteringAttacks = []attack{
	{name: "client leaves before the bill", stream: true, events: 449, hold: true, leaveAfter: 449, clientCap: 1000},
	{name: "backend under-reports its events", stream: true, events: 1000, report: 1, clientCap: 2000},
	{name: "backend ignores the cap", stream: true, events: 1004, report: 1004, clientCap: 50},
	{name: "decoy usage objects", events: 40, report: 40, clientCap: 1000, decoys: true, exact: true},
	{name: "decoy usage objects", stream: true, events: 40, report: 40, clientCap: 1000, decoys: true, exact: true},
	{name: "negative usage", events: 40, report: -5, clientCap: 1000, untrusted: true},
	{name: "negative usage", stream: true, events: 40, report: -5, clientCap: 1000, untrusted: true},
	{name: "overflowing usage", events: 40, report: 1 << 62, clientCap: 1000, untrusted: true},
	{name: "overflowing usage", stream: true, events: 40, report: 1 << 62, clientCap: 1000, untrusted: true},
	{name: "absent usage", events: 40, clientCap: 1000, noUsage: true},
	{name: "absent usage", stream: true, events: 40, clientCap: 1000, noUsage: true},
	// Bodies outside the bound: 900 KB of a text document once reserved
	// as one media part.
	{name: "text document", events: 40, report: 40, clientCap: 1000, exact: true, part: "text document", na: onlySources},
	{name: "text document", stream: true, events: 40, report: 40, clientCap: 1000, exact: true, part: "text document", na: onlySources},
	{name: "escaped text document", events: 40, report: 40, clientCap: 1000, exact: true, part: "escaped text document", na: onlySources},
	{name: "unknown keys holding text", events: 40, report: 40, clientCap: 1000, exact: true, part: "unknown keys"},
	{name: "unknown keys holding text", stream: true, events: 40, report: 40, clientCap: 1000, exact: true, part: "unknown keys"},
	{name: "escaped type values", events: 40, report: 40, clientCap: 1000, exact: true, part: "escaped type", na: noParts},
	{name: "escaped type values", stream: true, events: 40, report: 40, clientCap: 1000, exact: true, part: "escaped type", na: noParts},
	{name: "every media spelling", events: 40, report: 40, clientCap: 1000, exact: true, part: "media", na: noParts},
	// The store fails between reserve and settle.
	{name: "store fails between reserve and settle", events: 40, report: 40, clientCap: 1000, exact: true, storeFails: true},
	{name: "store fails between reserve and settle", stream: true, events: 40, report: 40, clientCap: 1000, exact: true, storeFails: true},
}

// bigText is a text the backend bills at a token per 4 bytes; at 200 KB
// it is far above one media part's bound.
var bigText = strings.Repeat("All work and no play makes Jack a dull boy. ", 200_000/44)

// bodyAttacks writes a body attack's content parts in op's spelling and
// the prompt tokens an honest backend bills for them; top is a member
// added to the body's top level ("" none).
func bodyAttack(op request.Operation, name string) (parts, top string, billed int64) {
	text := "text"
	if op.Shape() == request.ShapeResponses {
		text = "input_text"
	}
	big := int64(len(bigText) / 4)
	switch name {
	case "text document":
		return `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"` + bigText + `"}}`, "", big
	case "escaped text document":
		return `{"type":"d\u006fcument","source":{"type":"t\u0065xt","media_type":"text/plain","data":"` + bigText + `"}}`, "", big
	case "unknown keys":
		// The top-level key no field table names is dropped (the
		// backend never reads it); one inside a content part is
		// forwarded and counted.
		top = `"x_note":"` + bigText + `"`
		if noParts(op) != "" {
			return "", top, 0
		}
		return `{"type":"` + text + `","text":"hi","x_note":"` + bigText + `"}`, top, big
	case "escaped type":
		return `{"type":"` + strings.Replace(text, "t", "\u0074", 1) + `","text":"` + bigText + `"}`, "", big
	case "media":
		// Each part billed 1,000 tokens, below both media bounds.
		switch op.Shape() {
		case request.ShapeAnthropic:
			return `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},` +
				`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},` +
				`{"type":"im\u0061ge","source":{"type":"b\u0061se64","media_type":"image/png","data":"iVBORw0KGgo="}},` +
				`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}},` +
				`{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}`, "", 5000
		case request.ShapeResponses:
			return `{"type":"input_image","image_url":"https://example.com/a.png"},` +
				`{"type":"input_im\u0061ge","image_url":"https://example.com/b.png"},` +
				`{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}`, "", 3000
		}
		return `{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},` +
			`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},` +
			`{"type":"video_url","video_url":{"url":"https://example.com/v.mp4"}},` +
			`{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}}`, "", 4000
	}
	panic("unknown body attack " + name)
}

// flakyStore is a memory store whose first settle of a request fails, as
// a store that went away between reserve and settle does; being no
// *budget.Memory, the ledger treats it as remote and replays the settle.
type flakyStore struct {
	*budget.Memory
	failed atomic.Bool
}

func (f *flakyStore) Settle(ctx context.Context, tenant, id string, actual budget.Charge) (budget.Settlement, error) {
	if !strings.HasPrefix(id, "probe") && f.failed.CompareAndSwap(false, true) {
		return budget.Settlement{}, errors.New("store unreachable")
	}
	return f.Memory.Settle(ctx, tenant, id, actual)
}

// storeCharged waits until the ledger has replayed the failed settle
// (each probe reservation is an answer from the store, which starts the
// replay) and returns what the tenant's minute window holds (its month's
// spend with money).
func storeCharged(t *testing.T, l *budget.Ledger, money bool) int64 {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("probe", i)
		d, err := l.Reserve(ctx, "t1", id, budget.Ask{PromptBound: 1, ClientCap: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.SettleCharge(ctx, "t1", id, budget.Charge{}); err != nil {
			t.Fatal(err)
		}
		if l.Stats().Replayed > 0 && i > 0 {
			if money {
				return d.Spend[2].Used - d.MoneyGranted
			}
			return d.TPM.Used - d.Granted
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed settle was never replayed: %+v", l.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attackPrompt is the prompt tokens every backend double reports.
const attackPrompt = 20

// TestMeteringAttacks runs every attack against every billed operation
// that generates, in both modes: the tenant is charged at least the
// larger of its reservation and what the gateway counted (prompt bound
// plus the token events it relayed) whenever the bill is missing, cut
// or below the events relayed, and exactly the backend's bill otherwise.
func TestMeteringAttacks(t *testing.T) {
	for _, op := range request.Operations() {
		if !op.Billed() || !op.Generates() {
			continue // nothing generated: no output to meter
		}
		for _, mode := range []string{budget.ModeStrict, budget.ModeEstimate} {
			for _, at := range meteringAttacks {
				if at.stream && !op.Streams() {
					continue // compaction: JSON only
				}
				if at.na != nil && at.na(op) != "" {
					continue // the table says why
				}
				kind := "json"
				if at.stream {
					kind = "stream"
				}
				// Every attack again in money, the tenant with a spend
				// limit and its model priced at one micro-unit a token, so
				// the money charged must meet the same bounds as the
				// tokens.
				for _, money := range []bool{false, true} {
					dim := "tokens"
					if money {
						dim = "money"
					}
					t.Run(fmt.Sprintf("%s/%s/%s/%s/%s", op.Path(), mode, kind, dim, at.name), func(t *testing.T) {
						t.Parallel()
						runAttack(t, op, mode, at, money)
					})
				}
			}
		}
	}
}

func runAttack(t *testing.T, op request.Operation, mode string, at attack, money bool) {
	var store budget.Store
	flaky := &flakyStore{Memory: budget.NewMemory(nil)}
	if at.storeFails {
		store = flaky
	}
	lim := budget.Limits{TokensPerMinute: 10_000_000}
	if money {
		lim.SpendPerMonth = 10_000_000
	}
	spy := newBudgetSpy(t, budget.Config{Mode: mode}, store, budget.TenantBudget{Tenant: "t1", Limits: lim})
	kind := "openai"
	if op.Anthropic() {
		kind = "anthropic"
	}
	body := attackBody(op, at)
	if at.part != "" {
		_, _, at.prompt = bodyAttack(op, at.part)
	}
	g := gatewayOnKind(t, kind, func(d *Deps) { d.Budgets, d.Prices = spy, unitPrices(t) }, startBackend(t, attackBackend(op, at)))
	resp, err := http.Post(g.srv.URL+op.Path(), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	relayed := readAttack(t, resp, op, at)
	charged := lastSettle(t, spy)
	granted := spy.decision().Granted
	if money {
		// One micro-unit a token: the money is the tokens' count.
		charged, granted = spy.lastMoney(), spy.decision().MoneyGranted
	}
	bound := prompt.Scanner{}.Bound([]byte(body), op.Prompt()).Tokens
	if at.exact {
		want := at.promptTokens() + at.report
		t.Logf("charged %d (the bill %d), reserved %d, prompt bound %d", charged, want, granted, bound)
		if charged != want {
			t.Fatalf("charged %d, want the bill %d", charged, want)
		}
		if at.part != "" && (mode == budget.ModeStrict) && charged > granted {
			t.Fatalf("the bill %d overshot the reservation %d: the prompt bound %d missed the body's content", charged, granted, bound)
		}
		if at.storeFails {
			if got := storeCharged(t, spy.Ledger, money); got != want {
				t.Fatalf("the store holds %d once it answered again, want the bill %d", got, want)
			}
		}
		return
	}
	if at.hold {
		// The client left mid-stream: the backend was cancelled, so the
		// charge is its prompt (message_start's input, else the bound),
		// what was relayed and at most the allowance for what was in
		// flight (billing.StoppedAllowance).
		p := bound
		if op == request.Messages {
			p = attackPrompt
		}
		if charged < p+relayed || charged > p+relayed+billing.StoppedAllowance {
			t.Fatalf("charged %d for %d token events relayed: want %d and at most the allowance more (reserved %d, prompt bound %d)", charged, relayed, p+relayed, granted, bound)
		}
		return
	}
	// Every token event relayed is paid for; when the gateway never saw
	// a bill it can believe (none came, the stream was cut at its
	// reservation, or it reports less than was relayed) the charge is
	// at least the reservation and the gateway's own count.
	least := attackPrompt + relayed
	if at.noUsage || at.untrusted || at.report < relayed || (granted > 0 && relayed < int64(at.events)) {
		least = max(least, granted, bound+relayed)
	}
	if charged < least {
		t.Fatalf("charged %d for %d token events relayed: want at least %d (reserved %d, prompt bound %d)", charged, relayed, least, granted, bound)
	}
}

func startBackend(t *testing.T, h http.Handler) string {
	t.Helper()
	g := newTestGatewayWith(t, nil, h) // only for its backend's URL
	return g.urls[0]
}

// attackBody is op's request for the attack.
func attackBody(op request.Operation, at attack) string {
	if at.part != "" {
		parts, top, _ := bodyAttack(op, at.part)
		if top != "" {
			top = "," + top
		}
		switch op {
		case request.Completions:
			return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":%d,"prompt":"hi"%s}`, at.stream, at.clientCap, top)
		case request.Responses:
			return fmt.Sprintf(`{"model":"m","stream":%v,"max_output_tokens":%d,"input":[{"role":"user","content":[%s]}]%s}`, at.stream, at.clientCap, parts, top)
		case request.ResponsesCompact:
			return fmt.Sprintf(`{"model":"m","input":[{"role":"user","content":[%s]}]%s}`, parts, top)
		}
		return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":[%s]}]%s}`, at.stream, at.clientCap, parts, top)
	}
	switch op {
	case request.Completions:
		return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":%d,"prompt":"hi"}`, at.stream, at.clientCap)
	case request.Responses:
		return fmt.Sprintf(`{"model":"m","stream":%v,"max_output_tokens":%d,"input":"hi"}`, at.stream, at.clientCap)
	case request.ResponsesCompact: // no stream, no output cap in its API
		return `{"model":"m","input":"hi"}`
	}
	return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, at.stream, at.clientCap)
}

// readAttack reads the answer as the attacking client does and returns the
// token events it got.
func readAttack(t *testing.T, resp *http.Response, op request.Operation, at attack) int64 {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %.300s", resp.StatusCode, b)
	}
	if !at.stream {
		_, _ = io.ReadAll(resp.Body)
		return 0
	}
	var n int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case op.Meter().Named() && (line == "event: content_block_delta" || line == "event: response.output_text.delta"),
			!op.Meter().Named() && strings.HasPrefix(line, `data: {"id":"c","object":"chunk"`):
			n++
		}
		if at.leaveAfter > 0 && n == int64(at.leaveAfter) {
			return n // the client closes here
		}
	}
	return n
}

// attackBackend answers op's requests in its shape, as the attack says.
func attackBackend(op request.Operation, at attack) http.HandlerFunc {
	var ids atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := ids.Add(1)
		decoy := ""
		if at.decoys {
			decoy = `"usage":{"prompt_tokens":0,"completion_tokens":0,"input_tokens":0,"output_tokens":0,"total_tokens":0},`
		}
		if !at.stream {
			w.Header().Set("Content-Type", "application/json")
			text := strings.Repeat("x ", at.events)
			switch op {
			case request.Responses, request.ResponsesCompact:
				fmt.Fprintf(w, `{"id":"resp_%d","object":"response","status":"completed","metadata":{%s"k":"v"},"output":[{"type":"function_call","arguments":"{}","name":"f",%s"call_id":"c"},{"type":"message","content":[{"type":"output_text","text":%q}]}],%s}`,
					id, decoy, decoy, text, attackUsage(op, at))
			case request.Messages:
				fmt.Fprintf(w, `{"id":"msg_%d","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{%s"a":1}},{"type":"text","text":%q}],%s}`,
					id, decoy, text, attackUsage(op, at))
			default:
				fmt.Fprintf(w, `{"id":"c","object":"x","choices":[{"index":0,"message":{"role":"assistant",%s"content":%q},"text":%q}],%s}`,
					decoy, text, text, attackUsage(op, at))
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		ev := func(name, data string) {
			if name != "" {
				fmt.Fprintf(w, "event: %s\n", name)
			}
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
		switch op {
		case request.Responses:
			ev("response.created", fmt.Sprintf(`{"type":"response.created","response":{"id":"resp_%d","object":"response","status":"in_progress",%s"usage":null}}`, id, decoy))
		case request.Messages:
			ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_%d","type":"message","role":"assistant","content":[],"usage":{"input_tokens":%d,"output_tokens":1}}}`, id, at.promptTokens()))
			ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{%s"a":1}}}`, decoy))
		}
		for k := range at.events {
			switch op {
			case request.Responses:
				ev("response.output_text.delta", `{"type":"response.output_text.delta","delta":"x"}`)
			case request.Messages:
				ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`)
			default:
				ev("", `{"id":"c","object":"chunk","choices":[{"index":0,"delta":{"content":"x"},"text":"x"}]}`)
			}
			if k%50 == 0 {
				fl.Flush()
			}
		}
		fl.Flush()
		if at.hold {
			<-r.Context().Done()
			return
		}
		switch op {
		case request.Responses:
			ev("response.completed", fmt.Sprintf(`{"type":"response.completed","response":{"id":"resp_%d","object":"response","status":"completed",%s}}`,
				id, attackUsage(op, at)))
		case request.Messages:
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
			u := fmt.Sprintf(`"usage":{"output_tokens":%d}`, at.report)
			if at.noUsage {
				u = `"usage":null`
			}
			ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},%s}`, u))
			ev("message_stop", `{"type":"message_stop"}`)
		default:
			ev("", fmt.Sprintf(`{"id":"c","object":"chunk","choices":[],%s}`, attackUsage(op, at)))
			ev("", "[DONE]")
		}
		fl.Flush()
	}
}

// TestMeteringBackground: a background response's creating request (the
// backend answers "queued", no usage, and goes on generating) gets the
// output cap written and is charged its reservation, in estimate mode as in
// strict. Before, estimate mode wrote no cap and charged the prompt bound
// plus the answer's bytes.
func TestMeteringBackground(t *testing.T) {
	for _, mode := range []string{budget.ModeStrict, budget.ModeEstimate} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			spy := newBudgetSpy(t, budget.Config{Mode: mode}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 10_000_000}})
			var sent atomic.Value
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				sent.Store(string(b))
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"resp_bg1","object":"response","status":"queued","background":true,"output":[],"usage":null}`)
			}))
			body := `{"model":"m","background":true,"input":"write a long essay"}`
			resp, b := postPath(t, g, "/v1/responses", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var req struct {
				MaxOutputTokens int64 `json:"max_output_tokens"`
			}
			if s, _ := sent.Load().(string); json.Unmarshal([]byte(s), &req) != nil || req.MaxOutputTokens != budget.DefaultOutputTokens {
				t.Fatalf("backend got %v: want max_output_tokens %d written", sent.Load(), budget.DefaultOutputTokens)
			}
			bound := prompt.Scanner{}.Bound([]byte(body), request.Responses.Prompt()).Tokens
			want := bound + budget.DefaultOutputTokens
			if mode == budget.ModeStrict {
				if got := lastSettle(t, spy); got != want {
					t.Fatalf("charged %d, want the reservation %d", got, want)
				}
			}
			// Estimate mode leaves the reservation charged until the
			// response is retrieved complete (TestMeteringBackgroundRetrieved).
			if got := storeUsed(t, spy.Ledger); got != want {
				t.Fatalf("the store holds %d, want the reservation %d", got, want)
			}
		})
	}
}

// attackUsage is the bill's usage member in op's spelling.
func attackUsage(op request.Operation, at attack) string {
	switch {
	case at.noUsage:
		return `"usage":null`
	case op == request.Messages:
		return fmt.Sprintf(`"usage":{"input_tokens":%d,"output_tokens":%d}`, at.promptTokens(), at.report)
	case op == request.Responses || op == request.ResponsesCompact:
		return fmt.Sprintf(`"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}`, at.promptTokens(), at.report, at.promptTokens()+at.report)
	}
	return fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, at.promptTokens(), at.report, at.promptTokens()+at.report)
}

// TestMeteringBackgroundRetrieved: a background response's creating request
// leaves its reservation charged; when the response is later retrieved
// complete (GET /v1/responses/{id}, as JSON or as a resumed stream), its
// real usage (20 + 300) settles that reservation in estimate mode, once,
// and is logged in strict mode, which charged the reservation at creation.
// Before, estimate mode charged the reservation and never looked at the
// real usage.
func TestMeteringBackgroundRetrieved(t *testing.T) {
	for _, mode := range []string{budget.ModeStrict, budget.ModeEstimate} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", mode, stream), func(t *testing.T) {
				t.Parallel()
				// Money beside the tokens, at one micro-unit a token: the
				// money settles as the tokens do.
				spy := newBudgetSpy(t, budget.Config{Mode: mode}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 10_000_000, SpendPerMonth: 10_000_000}})
				done := `{"id":"resp_bg1","object":"response","status":"completed","background":true,"output":[],"usage":{"input_tokens":20,"output_tokens":300,"total_tokens":320}}`
				g := newTestGatewayWith(t, func(d *Deps) { d.Budgets, d.Prices = spy, unitPrices(t) }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					switch {
					case r.Method == http.MethodPost:
						w.Header().Set("Content-Type", "application/json")
						_, _ = io.WriteString(w, `{"id":"resp_bg1","object":"response","status":"queued","background":true,"output":[],"usage":null}`)
					case r.URL.Query().Get("stream") == "true":
						w.Header().Set("Content-Type", "text/event-stream")
						fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":%s}\n\n", done)
					default:
						w.Header().Set("Content-Type", "application/json")
						_, _ = io.WriteString(w, done)
					}
				}))
				body := `{"model":"m","background":true,"input":"write a long essay"}`
				if resp, b := postPath(t, g, "/v1/responses", body); resp.StatusCode != 200 {
					t.Fatalf("create: status %d: %s", resp.StatusCode, b)
				}
				bound := prompt.Scanner{}.Bound([]byte(body), request.Responses.Prompt()).Tokens
				reserved := bound + budget.DefaultOutputTokens
				if mode == budget.ModeStrict {
					if got := lastSettle(t, spy); got != reserved {
						t.Fatalf("strict: creation charged %d, want the reservation %d", got, reserved)
					}
				} else if calls := spy.log(); calls[len(calls)-1] != "reserve" {
					t.Fatalf("estimate: the creation settled (%v): its reservation should wait for the usage", calls)
				}
				path := "/v1/responses/resp_bg1"
				if stream {
					path += "?stream=true"
				}
				for range 2 { // a second retrieval settles nothing more
					resp, err := http.Get(g.srv.URL + path)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !strings.Contains(string(b), `"total_tokens":320`) {
						t.Fatalf("retrieve: status %d: %.300s", resp.StatusCode, b)
					}
				}
				used := storeUsed(t, spy.Ledger)
				money := spent(t, spy.Ledger, "probe-money")
				if mode == budget.ModeStrict {
					logged := false
					for _, l := range g.log.lines(t) {
						logged = logged || l["msg"] == "background response retrieved complete: strict mode charged its reservation at creation" && l["usage"] == float64(320)
					}
					if used != reserved || money != reserved || !logged {
						t.Fatalf("strict: the store holds %d tokens and %d money (want the reservation %d), usage logged %v", used, money, reserved, logged)
					}
					return
				}
				if used != 320 || money != 320 {
					t.Fatalf("estimate: the store holds %d tokens and %d money, want the real usage 320 (reserved %d)", used, money, reserved)
				}
				if n := strings.Count(strings.Join(spy.log(), "\n"), "settle 320"); n != 1 {
					t.Fatalf("settled %d times: %v", n, spy.log())
				}
			})
		}
	}
}

// storeUsed is what the tenant's minute window holds, read with a probe
// reservation settled at 0.
func storeUsed(t *testing.T, l *budget.Ledger) int64 {
	t.Helper()
	ctx := context.Background()
	d, err := l.Reserve(ctx, "t1", "probe-used", budget.Ask{PromptBound: 1, ClientCap: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SettleCharge(ctx, "t1", "probe-used", budget.Charge{}); err != nil {
		t.Fatal(err)
	}
	return d.TPM.Used - d.Granted
}
