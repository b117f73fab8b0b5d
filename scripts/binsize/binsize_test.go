package binsize_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/binsize"
)

// headroom is how far a module may grow past its line before the test asks
// for the line to be raised: a tenth, and at least 16 KiB, so that ordinary
// changes to the gateway's own code do not each need a new number.
func headroom(kib int64) int64 { return kib + max(kib/10, 16) }

// TestBinaryBudget builds bin/gateway as make build does and fails when a
// module is linked into it without a line in budget.tsv, when a module
// outgrows its line, or when the stripped binary outgrows the total: the
// binary does not grow without a line saying why.
func TestBinaryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway twice")
	}
	total, lines, err := binsize.Budget()
	if err != nil {
		t.Fatal(err)
	}
	r, err := binsize.Measure(context.Background(), "../..", "./functions/gateway")
	if err != nil {
		t.Fatal(err)
	}
	budget := map[string]int64{}
	for _, l := range lines {
		budget[l.Module] = l.KiB
	}
	var table strings.Builder
	for _, m := range r.Modules {
		kib := (m.Bytes + 1023) / 1024
		fmt.Fprintf(&table, "%s\t%d KiB\tinit %.3f ms, %d B\n", m.Path, kib, m.InitMs, m.InitBytes)
		line, ok := budget[m.Path]
		switch {
		case !ok && m.Bytes > 0:
			t.Errorf("%s (%d KiB) is linked into the gateway without a line in budget.tsv saying why", m.Path, kib)
		case ok && kib > headroom(line):
			t.Errorf("%s costs %d KiB, over its line's %d KiB by more than the headroom: raise the line in budget.tsv and say why", m.Path, kib, line)
		}
	}
	if got := r.Stripped / 1024; got > total+total/50 {
		t.Errorf("bin/gateway is %d KiB, over budget.tsv's total of %d KiB by more than 2%%: find the module that grew (below) and raise both lines, saying why", got, total)
	}
	t.Logf("bin/gateway %d KiB stripped; by module:\n%s", r.Stripped/1024, table.String())
}

// TestBudgetFileParses: every module has one line, and the lines (symbol
// bytes) sum to less than the total (the file, with its function tables)
// but to a good part of it, so a line cannot be a placeholder.
func TestBudgetFileParses(t *testing.T) {
	total, lines, err := binsize.Budget()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var sum int64
	for _, l := range lines {
		if seen[l.Module] {
			t.Errorf("budget.tsv names %s twice", l.Module)
		}
		seen[l.Module] = true
		sum += l.KiB
	}
	if sum > total || sum < total/3 {
		t.Errorf("budget.tsv's lines sum to %d KiB against a total of %d KiB: the lines are symbol bytes, the total the file", sum, total)
	}
}
