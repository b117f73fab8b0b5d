package budget

// Ask is what one request asks of a budget: its prompt bound, read from
// its body by package prompt's Scanner, and its choices and output cap, which the caller
// takes from its body decoder (the reading the backend gets).
type Ask struct {
	// PromptBound is a bound provably at least the prompt tokens the
	// backend will count (see prompt.Scanner.Bound for the proof and its premises).
	PromptBound int64
	// Choices is the number of completions generated (n, or best_of for
	// /v1/completions, whichever is larger); 0 means 1. Every choice may
	// produce the output cap.
	Choices int64
	// ClientCap is the client's output cap per choice, the largest of
	// max_completion_tokens, max_tokens and max_output_tokens present; 0
	// when none is.
	ClientCap int64
	// MinOutput is the least output cap per choice the backend accepts
	// (OpenAI's Responses API refuses a max_output_tokens below 16); 0 is
	// Config.MinOutputTokens. A request with less left is refused rather
	// than forwarded with a cap its backend rejects. Set by the caller.
	MinOutput int64
	// NoOutput marks a request without output tokens (embeddings).
	NoOutput bool
	// Hold reserves and caps the request as strict mode does, in either
	// mode: a background response goes on generating after its creating
	// request ends, so that request is charged its reservation rather
	// than what its answer showed (issue 30: in estimate mode it was
	// charged its JSON bytes, with no cap). Set by the caller.
	Hold bool
	// Unbounded marks a prompt that includes content the body does not
	// hold: a file, an earlier response or conversation, a hosted tool's
	// results. PromptBound covers only the body; the rest is charged when
	// the request settles, so such a request can overshoot a strict budget
	// by its hidden prompt.
	Unbounded bool
}

func (a Ask) choices() int64 { return max(a.Choices, 1) }
