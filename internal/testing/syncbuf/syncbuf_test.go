package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			fmt.Fprintf(&b, "line %d\n", i)
			_ = b.String()
		}(i)
	}
	wg.Wait()
	if n := len(b.Lines()); n != 50 {
		t.Fatalf("%d lines, want 50", n)
	}
}
