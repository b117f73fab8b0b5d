package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/billing"
)

// statusNames maps the net/http constants errors.go uses to their values.
var statusNames = map[string]int{
	"StatusBadRequest": http.StatusBadRequest, "StatusUnauthorized": http.StatusUnauthorized,
	"StatusForbidden": http.StatusForbidden, "StatusNotFound": http.StatusNotFound,
	"StatusMethodNotAllowed": http.StatusMethodNotAllowed, "StatusRequestTimeout": http.StatusRequestTimeout,
	"StatusRequestEntityTooLarge": http.StatusRequestEntityTooLarge, "StatusUpgradeRequired": http.StatusUpgradeRequired,
	"StatusTooManyRequests": http.StatusTooManyRequests, "StatusRequestHeaderFieldsTooLarge": http.StatusRequestHeaderFieldsTooLarge,
	"StatusInternalServerError": http.StatusInternalServerError, "StatusBadGateway": http.StatusBadGateway,
	"StatusServiceUnavailable": http.StatusServiceUnavailable, "StatusGatewayTimeout": http.StatusGatewayTimeout,
}

// refusalKinds maps the billing.Kind constants billing's refusals use to
// their values.
var refusalKinds = map[string]billing.Kind{"Invalid": billing.Invalid, "OverBudget": billing.OverBudget, "Failed": billing.Failed}

// errorsGoCodes reads every "status code" pair errors.go can answer:
// the calls of invalidRequest, serverError and serverErrorRetry, and the
// apiError literals; and those of package billing's Refusal literals,
// each at the status refusalError gives its Kind. 499 (nobody is
// listening: nothing is written) is left out.
func errorsGoCodes(t *testing.T) map[string]bool {
	t.Helper()
	files := []string{"errors.go"}
	billingFiles, err := filepath.Glob("../billing/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range billingFiles {
		if !strings.HasSuffix(name, "_test.go") {
			files = append(files, name)
		}
	}
	got := map[string]bool{}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fileCodes(t, f, got)
	}
	return got
}

// fileCodes adds to got the "status code" pairs of one file.
func fileCodes(t *testing.T, f *ast.File, got map[string]bool) {
	status := func(e ast.Expr) int {
		switch v := e.(type) {
		case *ast.SelectorExpr:
			n, ok := statusNames[v.Sel.Name]
			if !ok {
				t.Fatalf("errors.go uses http.%s: add it to statusNames", v.Sel.Name)
			}
			return n
		case *ast.BasicLit:
			n, _ := strconv.Atoi(v.Value)
			return n
		}
		return 0
	}
	kindStatus := func(e ast.Expr) int {
		id, ok := e.(*ast.Ident)
		k, known := refusalKinds[id.Name]
		if !ok || !known {
			t.Fatalf("a billing refusal has the kind %s: add it to refusalKinds", id.Name)
		}
		return refusalError(&billing.Refusal{Kind: k}).Status
	}
	add := func(st int, codes []string) {
		for _, code := range codes {
			if st != 0 && st != 499 && code != "" {
				got[strconv.Itoa(st)+" "+code] = true
			}
		}
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		// The string values each local variable is given (code :=
		// "unknown_parameter"; code = "duplicate_parameter").
		vars := map[string][]string{}
		ast.Inspect(fn, func(n ast.Node) bool {
			if a, ok := n.(*ast.AssignStmt); ok {
				for i, l := range a.Lhs {
					id, ok := l.(*ast.Ident)
					if lit, isLit := a.Rhs[min(i, len(a.Rhs)-1)].(*ast.BasicLit); ok && isLit && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						vars[id.Name] = append(vars[id.Name], v)
					}
				}
			}
			return true
		})
		strs := func(e ast.Expr) []string {
			switch v := e.(type) {
			case *ast.BasicLit:
				if v.Kind == token.STRING {
					s, _ := strconv.Unquote(v.Value)
					return []string{s}
				}
			case *ast.Ident:
				return vars[v.Name]
			}
			return nil
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.CallExpr:
				if id, ok := v.Fun.(*ast.Ident); ok && len(v.Args) >= 2 {
					switch id.Name {
					case "invalidRequest", "serverError", "serverErrorRetry":
						add(status(v.Args[0]), strs(v.Args[1]))
					}
				}
			case *ast.CompositeLit:
				id, ok := v.Type.(*ast.Ident)
				if !ok || (id.Name != "apiError" && id.Name != "Refusal") {
					return true
				}
				var st int
				var codes []string
				for _, el := range v.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch kv.Key.(*ast.Ident).Name {
					case "Status":
						st = status(kv.Value)
					case "Kind":
						st = kindStatus(kv.Value)
					case "Code":
						codes = strs(kv.Value)
					}
				}
				add(st, codes)
			}
			return true
		})
	}
}

var (
	tableRow = regexp.MustCompile(`^\| (\d{3}) \| ([^|]*) \|`)
	backtick = regexp.MustCompile("`([a-z_]+)`")
)

// docCodes reads the error table of docs/errors.md: each row's status and the
// codes in its second column.
func docCodes(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Errors\n")
	if !ok {
		t.Fatal("docs/errors.md has no ## Errors section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	got := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, c := range backtick.FindAllStringSubmatch(m[2], -1) {
			got[m[1]+" "+c[1]] = true
		}
	}
	return got
}

// TestErrorsDocTable: the error table of docs/errors.md lists exactly the
// statuses and codes errors.go and billing's refusals answer (six were
// once missing).
func TestErrorsDocTable(t *testing.T) {
	code, doc := errorsGoCodes(t), docCodes(t)
	if len(code) < 20 {
		t.Fatalf("read only %d codes from errors.go: %v", len(code), code)
	}
	var missing, extra []string
	for c := range code {
		if !doc[c] {
			missing = append(missing, c)
		}
	}
	for c := range doc {
		if !code[c] {
			extra = append(extra, c)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("errors.go answers these, docs/errors.md's error table lacks them (status code):\n  %s", strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("docs/errors.md's error table lists these, errors.go never answers them:\n  %s", strings.Join(extra, "\n  "))
	}
}
