package stub

import (
	"hash/fnv"
	"strings"
)

// tokenText is the content of every token unless Options.Prose: a
// response's text is then strings.Repeat(tokenText, completion_tokens),
// streamed or not, which the gateway's tests count on.
const tokenText = " tok"

// prose is what the stub says with Options.Prose, one word a token. Its
// words must need no JSON escaping: the stream templates splice them in
// raw (TestProseWordsAreJSONSafe).
const prose = "The stub backend is answering in place of a real model. " +
	"Each word you read here arrives as one token of the stream. " +
	"Nothing here came from a neural network, so this answer costs nothing. " +
	"Ask the same question again and you will get the same reply. " +
	"The gateway in front of it relays every event as soon as it arrives. " +
	"This sentence is here so that long answers do not repeat too soon."

// speech is the text a Server answers with. Token k of choice c of a
// request is a pure function of the request's seed, so that the same
// request always gets the same text, streamed or not.
type speech struct {
	words  []string // " word", each one token; nil means tokenText
	starts []int    // the index in words of each sentence's first word
}

func newSpeech(useProse bool) *speech {
	sp := &speech{}
	if !useProse {
		return sp
	}
	for w := range strings.FieldsSeq(prose) {
		if len(sp.words) == 0 || strings.HasSuffix(sp.words[len(sp.words)-1], ".") {
			sp.starts = append(sp.starts, len(sp.words))
		}
		sp.words = append(sp.words, " "+w)
	}
	return sp
}

// seedOf is the seed of a request's text: a hash of its body, so that a
// different prompt starts on a different sentence.
func (sp *speech) seedOf(body []byte) uint64 {
	if sp == nil || sp.words == nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(body)
	return h.Sum64()
}

// word returns token k of choice c: tokenText (also from a nil speech),
// or with prose, the words from sentence
// (seed+c) on, round the text, the first without its leading space.
func (sp *speech) word(seed uint64, c, k int) string {
	if sp == nil || sp.words == nil {
		return tokenText
	}
	start := sp.starts[(seed+uint64(c))%uint64(len(sp.starts))]
	w := sp.words[(start+k)%len(sp.words)]
	if k == 0 {
		return w[1:]
	}
	return w
}

// text is the first tokens tokens of choice c, concatenated.
func (sp *speech) text(seed uint64, c, tokens int) string {
	var b strings.Builder
	for k := range tokens {
		b.WriteString(sp.word(seed, c, k))
	}
	return b.String()
}
