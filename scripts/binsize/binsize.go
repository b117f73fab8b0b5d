// Package binsize measures what each module costs the gateway's binary:
// the bytes of the symbols the linker placed in the file for the module's
// packages (ELF symbol sizes, sections with file content only), and what
// the module's package initializers cost a cold start (GODEBUG=inittrace).
// The budget beside it (budget.tsv) gives every module linked into the
// binary a line with its size and why it is there; TestBinaryBudget fails
// when a module appears without a line or outgrows its line, and the bench
// renders the table into BENCHMARKS.md.
package binsize

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Std names the Go runtime and standard library in a Report, and
// Unattributed the symbols of no package (string data, type descriptors
// of composite types, the function tables).
const (
	Std          = "std"
	Unattributed = "(unattributed)"
)

// Module is what one module costs.
type Module struct {
	Path      string
	Bytes     int64   // symbol bytes in the unstripped binary's file sections
	InitMs    float64 // package initializers' clock time at start
	InitBytes int64   // … and what they allocated
}

// Report is one measurement of a main package.
type Report struct {
	Stripped int64    // the binary as make build builds it (-s -w)
	Modules  []Module // largest first
}

// Measure builds pkg (relative to the module root dir) twice, as make build
// does and without -s -w (the symbol table stripping drops), and reads the
// second's symbols and the initializers' trace of a start that exits at
// once. The builds land in a temporary folder that is removed.
func Measure(ctx context.Context, dir, pkg string) (*Report, error) {
	tmp, err := os.MkdirTemp("", "binsize")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	stripped, full := filepath.Join(tmp, "stripped"), filepath.Join(tmp, "full")
	for _, b := range []struct {
		out   string
		flags []string
	}{{stripped, []string{"-ldflags=-s -w"}}, {full, nil}} {
		args := append([]string{"build", "-tags", "lambda.norpc", "-trimpath", "-o", b.out}, b.flags...)
		cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	fi, err := os.Stat(stripped)
	if err != nil {
		return nil, err
	}
	modOf, err := modules(ctx, dir, pkg)
	if err != nil {
		return nil, err
	}
	byMod := map[string]*Module{}
	mod := func(path string) *Module {
		if byMod[path] == nil {
			byMod[path] = &Module{Path: path}
		}
		return byMod[path]
	}
	syms, err := symbols(full)
	if err != nil {
		return nil, err
	}
	for name, size := range syms {
		mod(attribute(name, modOf)).Bytes += size
	}
	// The trace goes to stderr before main runs; -check of a missing file
	// then exits at once.
	cmd := exec.CommandContext(ctx, full, "-check", "-config", filepath.Join(tmp, "none.yaml"))
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var trace bytes.Buffer
	cmd.Stderr = &trace
	_ = cmd.Run()
	for _, in := range inits(trace.Bytes()) {
		m := mod(moduleOf(in.pkg, modOf))
		m.InitMs += in.ms
		m.InitBytes += in.bytes
	}
	r := &Report{Stripped: fi.Size()}
	for _, m := range byMod {
		r.Modules = append(r.Modules, *m)
	}
	sort.Slice(r.Modules, func(i, j int) bool { return r.Modules[i].Bytes > r.Modules[j].Bytes })
	return r, nil
}

// modules maps every package pkg links to its module (Std for the
// standard library).
func modules(ctx context.Context, dir, pkg string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", "lambda.norpc",
		"-f", "{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{else}}"+Std+"{{end}}", pkg)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w", pkg, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, mod, ok := strings.Cut(line, " "); ok {
			m[p] = mod
		}
	}
	return m, nil
}

// symbols reads the sizes of the binary's symbols that occupy the file
// (zero-filled sections such as .bss hold none).
func symbols(bin string) (map[string]int64, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	out := map[string]int64{}
	for _, s := range syms {
		if int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) || s.Size == 0 {
			continue
		}
		if f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue
		}
		out[s.Name] += int64(s.Size)
	}
	return out, nil
}

// attribute names the module of a symbol: the longest linked package
// path that prefixes the name (after the linker's type: and go:itab.
// prefixes and pointer stars), else Unattributed.
func attribute(name string, modOf map[string]string) string {
	for _, p := range []string{"type:", "go:itab.", "go:link."} {
		name = strings.TrimPrefix(name, p)
	}
	name = strings.TrimLeft(name, "*")
	if i := strings.IndexAny(name, "[,"); i >= 0 {
		name = name[:i]
	}
	for p := name; p != ""; {
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
		if m, ok := modOf[p]; ok {
			return m
		}
	}
	return Unattributed
}

func moduleOf(pkg string, modOf map[string]string) string {
	if m, ok := modOf[pkg]; ok {
		return m
	}
	return Unattributed
}

type initCost struct {
	pkg   string
	ms    float64
	bytes int64
}

var initLine = regexp.MustCompile(`^init (\S+) @\S+ ms, ([0-9.]+) ms clock, ([0-9]+) bytes`)

// inits parses GODEBUG=inittrace=1 output.
func inits(trace []byte) []initCost {
	var out []initCost
	sc := bufio.NewScanner(bytes.NewReader(trace))
	for sc.Scan() {
		m := initLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ms, _ := strconv.ParseFloat(m[2], 64)
		b, _ := strconv.ParseInt(m[3], 10, 64)
		out = append(out, initCost{m[1], ms, b})
	}
	return out
}

// Line is one line of the budget: a module, the bytes it may cost and
// why the binary carries it.
type Line struct {
	Module string
	KiB    int64
	Why    string
}

//go:embed budget.tsv
var budgetFile string

// Budget reads budget.tsv: the stripped binary's size in KiB on the line
// named "total", then one line per module.
func Budget() (total int64, lines []Line, err error) {
	for i, l := range strings.Split(budgetFile, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.SplitN(l, "\t", 3)
		if len(f) != 3 {
			return 0, nil, fmt.Errorf("budget.tsv:%d: want module, KiB and why, tab-separated", i+1)
		}
		kib, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || strings.TrimSpace(f[2]) == "" {
			return 0, nil, fmt.Errorf("budget.tsv:%d: %q: want a number of KiB and a reason", i+1, l)
		}
		if f[0] == "total" {
			total = kib
			continue
		}
		lines = append(lines, Line{f[0], kib, f[2]})
	}
	if total == 0 {
		return 0, nil, fmt.Errorf("budget.tsv has no total line")
	}
	return total, lines, nil
}
