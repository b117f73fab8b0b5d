package budget

// PromptBound returns Scanner{}.Ask(body, f).PromptBound: a bound provably
// at least the prompt tokens the backend counts for body. The tests and
// fuzzers read the bound alone; the gateway reads the whole Ask.
func PromptBound(body []byte, f Format) int {
	return int(Scanner{}.Ask(body, f).PromptBound)
}
