package sse

import (
	"fmt"
	"strings"
	"testing"
)

// TestRelayMeter: a stream's usage is Final only from its meter's bill
// (the chat usage chunk or a usage before [DONE]; the Responses terminal
// events; the Messages API's message_delta, never message_start), and its
// FloorEvents are the meter's floor events (chat content chunks; the
// Responses text, refusal, reasoning and argument deltas; Messages
// content_block_delta with non-empty text, thinking or tool input), read
// at any read size.
func TestRelayMeter(t *testing.T) {
	msgStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n"
	text := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
	emptyText := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n"
	thinking := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\": \"thinking_delta\", \"thinking\": \"hmm\"}}\n\n"
	signature := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n"
	emptyJSON := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n"
	toolJSON := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"text_delta\\\":\\\"\\\"\"}}\n\n"
	msgDelta := "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n"
	msgDeltaNoUsage := "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n"
	msgStop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

	created := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n"
	outText := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
	refusal := "event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"delta\":\"no\"}\n\n"
	reasoning := "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"so\"}\n\n"
	args := "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\"}\n\n"
	audio := "event: response.audio.delta\ndata: {\"type\":\"response.audio.delta\",\"delta\":\"AAAA\"}\n\n"
	completed := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":4,\"total_tokens\":9}}}\n\n"
	failedNoUsage := "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"usage\":null}}\n\n"

	running := `data: {"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":{"prompt_tokens":400,"completion_tokens":1,"total_tokens":401}}` + "\n\n"

	for _, tt := range []struct {
		name           string
		meter          Meter
		in             string
		final, usage   bool
		floor, wantOut int64 // FloorEvents; the usage's output tokens
	}{
		{"messages whole", testMessagesMeter, msgStart + text + text + msgDelta + msgStop, true, true, 2, 9},
		{"messages client gone before message_delta", testMessagesMeter, msgStart + text + text + text, false, true, 3, 1},
		{"messages message_delta without usage", testMessagesMeter, msgStart + text + msgDeltaNoUsage + msgStop, false, true, 1, 1},
		{"messages floor: text, thinking and tool input; not empty or signature", testMessagesMeter,
			msgStart + text + emptyText + thinking + signature + emptyJSON + toolJSON + msgDelta + msgStop, true, true, 3, 9},
		{"responses completed", testResponsesMeter, created + outText + refusal + reasoning + args + audio + completed, true, true, 4, 4},
		{"responses cut before completed", testResponsesMeter, created + outText + outText, false, false, 2, 0},
		{"responses failed without usage", testResponsesMeter, created + outText + failedNoUsage, false, false, 1, 0},
		{"chat usage chunk", Meter{}, chunkAzure + chunkContent + chunkContent + chunkUsage + chunkDone, true, true, 3, 128},
		{"chat client gone before the usage chunk", Meter{}, chunkContent + running + running, false, true, 3, 1},
		{"chat running usage then [DONE]", Meter{}, chunkContent + running + chunkDone, true, true, 2, 1},
	} {
		for _, size := range []int{1, 13, 1 << 16} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				var r Relayer
				var out strings.Builder
				res, err := r.Relay(&out, nil, &chunkReader{src: []byte(tt.in), sizes: []int{size}}, Options{Meter: tt.meter})
				if err != nil || out.String() != tt.in {
					t.Fatalf("err %v, out %q", err, out.String())
				}
				if res.Final != tt.final || res.HasUsage != tt.usage || res.FloorEvents != tt.floor || res.Usage.CompletionTokens != tt.wantOut {
					t.Fatalf("final %v has usage %v floor events %d output %d; want %v %v %d %d",
						res.Final, res.HasUsage, res.FloorEvents, res.Usage.CompletionTokens, tt.final, tt.usage, tt.floor, tt.wantOut)
				}
			})
		}
	}
}

// TestOutputFloor: a named stream's floor is its floor events; a
// data-only stream's leaves each choice's role and finish chunks and one
// filter chunk out.
func TestOutputFloor(t *testing.T) {
	for _, tt := range []struct {
		meter           Meter
		events, choices int64
		want            int64
	}{
		{testMessagesMeter, 1000, 1, 1000},
		{testResponsesMeter, 800, 1, 800},
		{Meter{}, 1000, 1, 996},
		{Meter{}, 1000, 3, 992},
		{Meter{}, 3, 1, 0},
	} {
		if got := tt.meter.OutputFloor(tt.events, tt.choices); got != tt.want {
			t.Errorf("OutputFloor(%d, %d) named %v = %d, want %d", tt.events, tt.choices, tt.meter.Named(), got, tt.want)
		}
	}
}
