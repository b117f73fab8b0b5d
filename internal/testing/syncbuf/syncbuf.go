// Package syncbuf owns the one buffer that tests and test helpers hand to a
// process or logger as its output while they read it from another goroutine.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for one writer and concurrent readers. The
// zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns what was written, split at newlines, without the last empty line.
func (s *Buffer) Lines() []string {
	return strings.Split(strings.TrimSpace(s.String()), "\n")
}
