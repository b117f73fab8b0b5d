// Command racepkgs prints the import paths of the packages, among those its
// arguments name (go list patterns), in which the race detector can find
// anything: those whose code or tests start a goroutine, make a channel,
// use sync, sync/atomic or errgroup, or arm a timer callback. A package
// with none of these runs its code on the test's one goroutine, so a race
// pass over it repeats the plain pass at several times its cost. make test
// runs the race pass on this list, so a package that gains concurrency
// joins the pass by itself.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	args := append([]string{"list", "-tags", "lambda.norpc", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \",\"}},{{join .TestGoFiles \",\"}},{{join .XTestGoFiles \",\"}}"}, os.Args[1:]...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "racepkgs: go list:", err)
		os.Exit(1)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		concurrent, err := concurrent(f[1], strings.Split(f[2], ","))
		if err != nil {
			fmt.Fprintln(os.Stderr, "racepkgs:", err)
			os.Exit(1)
		}
		if concurrent {
			fmt.Println(f[0])
		}
	}
}

// concurrent reports whether any of the files uses concurrency.
func concurrent(dir string, files []string) (bool, error) {
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "" {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return false, err
		}
		for _, imp := range file.Imports {
			switch p, _ := strconv.Unquote(imp.Path.Value); p {
			case "sync", "sync/atomic", "golang.org/x/sync/errgroup":
				return true, nil
			}
		}
		found := false
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt, *ast.ChanType:
				found = true
			case *ast.SelectorExpr:
				if n.Sel.Name == "AfterFunc" {
					found = true
				}
			}
			return !found
		})
		if found {
			return true, nil
		}
	}
	return false, nil
}
