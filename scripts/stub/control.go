package stub

// The agents' control prompts: a conversation the agent asks to have
// summarized, or continues from a summary, is answered in text as the
// services answer it. Called as any other turn, the stub answered these
// with a tool call: Claude Code's /compact reported "summarization
// produced empty response", and Codex's local compaction looped (the
// compacted window no longer holds the tool's output, so every turn
// called the tool again and compacted again, hundreds of requests a
// minute).

import "bytes"

// controlPrompts are the words the agents' control prompts carry, as
// Claude Code 2.1 and Codex 0.171 send them: Claude Code's /compact (and
// its automatic compaction) asks for a summary "with TEXT ONLY"; Codex's
// local compaction asks for a "CONTEXT CHECKPOINT COMPACTION" and
// continues the turn on a window ending with the summary it got, behind
// its "Another language model started to solve this problem" preface.
var controlPrompts = [][]byte{
	[]byte("CRITICAL: Respond with TEXT ONLY"),
	[]byte("Your task is to create a detailed summary of"),
	[]byte("You are performing a CONTEXT CHECKPOINT COMPACTION"),
	[]byte("Another language model started to solve this problem and produced a summary"),
}

// isControlPrompt reports whether text, the conversation's last turn (or
// its last words), is one of controlPrompts: the answer is text.
func isControlPrompt(text []byte) bool {
	for _, p := range controlPrompts {
		if bytes.Contains(text, p) {
			return true
		}
	}
	return false
}
