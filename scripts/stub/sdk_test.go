package stub

// The stub as the official Go SDK sees it: what a client decodes is what a
// real backend's answer decodes to.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func sdkClient(t *testing.T, opts Options) (openai.Client, *Server) {
	t.Helper()
	st, ts := start(t, opts)
	return openai.NewClient(
		option.WithBaseURL(ts.URL+"/v1/"),
		option.WithAPIKey("sk-test"),
		option.WithHTTPClient(ts.Client()),
		option.WithMaxRetries(0),
	), st
}

func TestSDKResponses(t *testing.T) {
	t.Parallel()
	opts := fast
	opts.Prose, opts.Tokens = true, 12
	c, st := sdkClient(t, opts)
	ctx := context.Background()

	first, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "gpt-4.1",
		Instructions: openai.String("answer briefly"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		User:         openai.String("user-1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != responses.ResponseStatusCompleted || len(strings.Fields(first.OutputText())) != 12 ||
		first.Usage.OutputTokens != 12 || first.Usage.TotalTokens != first.Usage.InputTokens+12 || first.Instructions.OfString != "answer briefly" {
		t.Fatalf("response %s", first.RawJSON())
	}

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model:              "gpt-4.1",
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")},
		PreviousResponseID: openai.String(first.ID),
		MaxOutputTokens:    openai.Int(5),
	})
	var deltas strings.Builder
	var final responses.Response
	var seq []int64
	for stream.Next() {
		ev := stream.Current()
		seq = append(seq, ev.SequenceNumber)
		switch e := ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			deltas.WriteString(e.Delta)
		case responses.ResponseIncompleteEvent:
			final = e.Response
		case responses.ResponseCompletedEvent:
			t.Fatalf("completed, want incomplete: %s", e.RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i, n := range seq {
		if n != int64(i) {
			t.Fatalf("sequence numbers %v", seq)
		}
	}
	if final.Status != responses.ResponseStatusIncomplete || final.IncompleteDetails.Reason != "max_output_tokens" ||
		final.OutputText() != deltas.String() || final.PreviousResponseID != first.ID || final.Usage.OutputTokens != 5 {
		t.Fatalf("final %s; deltas %q", final.RawJSON(), deltas.String())
	}

	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != deltas.String() {
		t.Fatalf("Get: %v %+v", err, got)
	}
	items, err := c.Responses.InputItems.List(ctx, final.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 || items.Data[0].Type != "message" || items.HasMore {
		t.Fatalf("InputItems: %v %s", err, items.RawJSON())
	}
	if msg := items.Data[0].AsMessage(); msg.Role != "user" || len(msg.Content) != 1 || msg.Content[0].Text != "and then?" {
		t.Fatalf("input item %s", items.Data[0].RawJSON())
	}
	if _, err := c.Responses.Cancel(ctx, first.ID); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("Cancel of a foreground response: %v", err)
	}
	if err := c.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if !isStatus(err, http.StatusNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	for _, rec := range st.Requests() {
		if strings.Contains(string(rec.Body), "stream_options") {
			t.Fatalf("the SDK sent stream_options: %s", rec.Body)
		}
	}
}

func isStatus(err error, status int) bool {
	var ae *openai.Error
	return errors.As(err, &ae) && ae.StatusCode == status && ae.Message != ""
}

func TestSDKChatChoices(t *testing.T) {
	t.Parallel()
	opts := fast
	opts.Prose = true
	c, _ := sdkClient(t, opts)
	params := openai.ChatCompletionNewParams{
		Model:    "m",
		N:        openai.Int(3),
		User:     openai.String("user-1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}
	res, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 3 || res.Usage.CompletionTokens != 15 {
		t.Fatalf("completion %s", res.RawJSON())
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator refused %s", stream.Current().RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 3 || acc.Usage.CompletionTokens != 15 {
		t.Fatalf("accumulated %+v usage %+v", acc.Choices, acc.Usage)
	}
	for i, ch := range acc.Choices {
		if len(strings.Fields(ch.Message.Content)) != 5 || ch.FinishReason != "stop" {
			t.Fatalf("choice %d: %+v", i, ch)
		}
	}
}

func TestSDKEmbeddings(t *testing.T) {
	t.Parallel()
	c, _ := sdkClient(t, fast)
	res, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model:      "e",
		Input:      openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
		Dimensions: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != 2 || len(res.Data[1].Embedding) != 16 || res.Data[1].Index != 1 || res.Usage.PromptTokens != 2 {
		t.Fatalf("embeddings %s", res.RawJSON())
	}
}
