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

// wording is the stub's text generator: the text a Server answers with.
// Token k of choice c of a request is a pure function of the request's
// seed, so that the same request always gets the same text, streamed or
// not.
type wording struct {
	words  []string // " word", each one token; nil means tokenText
	starts []int    // the index in words of each sentence's first word
}

func newWording(useProse bool) *wording {
	wd := &wording{}
	if !useProse {
		return wd
	}
	for w := range strings.FieldsSeq(prose) {
		if len(wd.words) == 0 || strings.HasSuffix(wd.words[len(wd.words)-1], ".") {
			wd.starts = append(wd.starts, len(wd.words))
		}
		wd.words = append(wd.words, " "+w)
	}
	return wd
}

// seedOf is the seed of a request's text: a hash of its body, so that a
// different prompt starts on a different sentence.
func (wd *wording) seedOf(body []byte) uint64 {
	if wd == nil || wd.words == nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(body)
	return h.Sum64()
}

// word returns token k of choice c: tokenText (also from a nil wording),
// or with prose, the words from sentence
// (seed+c) on, round the text, the first without its leading space.
func (wd *wording) word(seed uint64, c, k int) string {
	if wd == nil || wd.words == nil {
		return tokenText
	}
	start := wd.starts[(seed+uint64(c))%uint64(len(wd.starts))]
	w := wd.words[(start+k)%len(wd.words)]
	if k == 0 {
		return w[1:]
	}
	return w
}

// text is the first tokens tokens of choice c, concatenated.
func (wd *wording) text(seed uint64, c, tokens int) string {
	var b strings.Builder
	for k := range tokens {
		b.WriteString(wd.word(seed, c, k))
	}
	return b.String()
}
