// Command filepairs counts how many pairs of a package's non-test files
// reference each other: file A uses a package-level identifier (a
// function, method, type, variable or constant) declared in file B, or the
// reverse. It measures a package's coupling, the server package's first:
//
//	go run ./scripts/filepairs -tags lambda.norpc ./shared/server
//
// It prints each referencing pair, with what one file uses of the other,
// and then "N of M pairs". -q prints only the count.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	tags := flag.String("tags", "", "build tags, as go build takes them")
	quiet := flag.Bool("q", false, "print only the count")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: filepairs [-tags t] [-q] ./path/to/package")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *tags, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "filepairs:", err)
		os.Exit(1)
	}
}

// listed is what go list says of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
}

func goList(tags string, args ...string) ([]listed, error) {
	cmd := exec.Command("go", append([]string{"list", "-json", "-tags", tags}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", strings.Join(args, " "), err)
	}
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

func run(out io.Writer, pattern, tags string, quiet bool) error {
	pkgs, err := goList(tags, pattern)
	if err != nil {
		return err
	}
	if len(pkgs) != 1 {
		return fmt.Errorf("%s names %d packages, not one", pattern, len(pkgs))
	}
	pkg := pkgs[0]
	// The dependencies' export data, so that only this package is
	// type-checked from source.
	deps, err := goList(tags, "-export", "-deps", pattern)
	if err != nil {
		return err
	}
	exports := map[string]string{}
	for _, d := range deps {
		exports[d.ImportPath] = d.Export
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", name, err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	tp, err := (&types.Config{Importer: imp}).Check(pkg.ImportPath, fset, files, info)
	if err != nil {
		return fmt.Errorf("type-checking %s: %w", pkg.ImportPath, err)
	}
	// uses[a][b] is what file a uses of file b's declarations.
	uses := map[string]map[string]map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != tp || !packageLevel(tp, obj) {
			continue
		}
		from, to := fileOf(fset, id.Pos()), fileOf(fset, obj.Pos())
		if from == to {
			continue
		}
		if uses[from] == nil {
			uses[from] = map[string]map[string]bool{}
		}
		if uses[from][to] == nil {
			uses[from][to] = map[string]bool{}
		}
		uses[from][to][obj.Name()] = true
	}
	names := make([]string, len(pkg.GoFiles))
	copy(names, pkg.GoFiles)
	sort.Strings(names)
	pairs := 0
	for i, a := range names {
		for _, b := range names[i+1:] {
			ab, ba := uses[a][b], uses[b][a]
			if len(ab) == 0 && len(ba) == 0 {
				continue
			}
			pairs++
			if !quiet {
				fmt.Fprintf(out, "%s -> %s: %s\n%s -> %s: %s\n", a, b, list(ab), b, a, list(ba))
			}
		}
	}
	fmt.Fprintf(out, "%d of %d pairs\n", pairs, len(names)*(len(names)-1)/2)
	return nil
}

// packageLevel reports whether obj is declared at package level: in the
// package scope, or a method of a package-level type.
func packageLevel(pkg *types.Package, obj types.Object) bool {
	if obj.Parent() == pkg.Scope() {
		return true
	}
	fn, ok := obj.(*types.Func)
	return ok && fn.Signature().Recv() != nil
}

func fileOf(fset *token.FileSet, pos token.Pos) string {
	return filepath.Base(fset.Position(pos).Filename)
}

func list(set map[string]bool) string {
	if len(set) == 0 {
		return "-"
	}
	s := make([]string, 0, len(set))
	for n := range set {
		s = append(s, n)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}
