package budget

// The output-cap arithmetic of a strict reservation, as pure functions so
// that every case is a table test. Amounts saturate at MaxTokens instead of
// overflowing (a client may send any n or max_tokens).

// OutputWant returns the output tokens per choice a request should reserve:
// the client's cap (or defaultOut when the client sent none), never more
// than the tenant's cap. Zero arguments are absent; a client cap of 0 is
// treated as absent (OpenAI rejects it anyway).
func OutputWant(client, tenantMax, defaultOut int64) int64 {
	w := defaultOut
	if client > 0 {
		w = client
	}
	if tenantMax > 0 && (w <= 0 || tenantMax < w) {
		w = tenantMax
	}
	return max(w, 0)
}

// GrantedOutput returns the output tokens per choice that a grant leaves
// after the prompt bound: floor((granted-promptBound)/choices), at least 0.
func GrantedOutput(granted, promptBound, choices int64) int64 {
	if choices < 1 {
		choices = 1
	}
	return max(0, granted-promptBound) / choices
}

// OutputCap returns the output cap per choice to write into the request,
// the least of the client's cap, the tenant's cap and the budget's (each 0
// when absent), and whether the body must be rewritten: the client sent no
// cap, or a larger one. cap 0 means no cap at all (nothing to write).
func OutputCap(client, tenantMax, budget int64) (cap int64, rewrite bool) {
	for _, c := range [...]int64{client, tenantMax, budget} {
		if c > 0 && (cap == 0 || c < cap) {
			cap = c
		}
	}
	return cap, cap > 0 && (client <= 0 || cap < client)
}

// satAdd and satMul add and multiply non-negative amounts, saturating at
// MaxTokens.
func satAdd(a, b int64) int64 {
	if a >= MaxTokens-b {
		return MaxTokens
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > MaxTokens/b {
		return MaxTokens
	}
	return min(a*b, MaxTokens)
}
