// Package dashboards holds the Grafana dashboard of the gateway's metrics
// (llmgw.grafana.json) and its test: the JSON parses, and every metric
// and label its queries name is one the gateway exports, as a
// Prometheus-compatible backend names it (OTLP names with dots as
// underscores, the unit's suffix, _total on counters, _bucket/_sum/_count
// on histograms). The metrics are read from the instrument definitions in
// shared/telemetry/otlp, so a renamed metric fails here.
package dashboards

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const otlpDir = "../../shared/telemetry/otlp"

// exported reads the instruments (name → Prometheus series names) from
// instruments.go, and every attribute key the package sets.
func exported(t *testing.T) (series map[string]string, labels map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	series, labels = map[string]string{}, map[string]bool{}
	files, err := filepath.Glob(filepath.Join(otlpDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		helpers := instrumentHelpers(f)
		ast.Inspect(f, func(n ast.Node) bool {
			// A call of a local helper that makes one kind of instrument
			// (counter := func(name, unit, description string)
			// metric.Int64Counter {…}): the kind is its result type, the
			// unit its WithUnit literal or its unit argument.
			if call, ok := n.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok {
					if h, ok := helpers[id.Name]; ok && len(call.Args) > 0 {
						name, unit := stringArg(call.Args[0]), h.unit
						if h.unitArg >= 0 && h.unitArg < len(call.Args) {
							unit = stringArg(call.Args[h.unitArg])
						}
						if name != "" {
							addSeries(series, name, unit, h.kind)
						}
						return true
					}
				}
			}
			// A metric the gateway aggregates itself is a metricDef
			// literal: its name, unit and SDK instrument kind.
			if lit, ok := n.(*ast.CompositeLit); ok {
				if id, ok := lit.Type.(*ast.Ident); ok && id.Name == "metricDef" {
					var name, unit, kind string
					for _, e := range lit.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							continue
						}
						switch k := kv.Key.(*ast.Ident); {
						case k == nil:
						case k.Name == "name" || k.Name == "unit":
							if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
								str, _ := strconv.Unquote(v.Value)
								if k.Name == "name" {
									name = str
								} else {
									unit = str
								}
							}
						case k.Name == "kind":
							if v, ok := kv.Value.(*ast.SelectorExpr); ok {
								kind = strings.TrimPrefix(v.Sel.Name, "InstrumentKind")
							}
						}
					}
					if name != "" && kind != "" {
						addSeries(series, name, unit, kind)
					}
				}
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			first, ok := call.Args[0].(*ast.BasicLit)
			if !ok || first.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(first.Value)
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "attribute" {
				labels[promName(name)] = true
				return true
			}
			kind := sel.Sel.Name
			if !strings.HasPrefix(kind, "Int64") && !strings.HasPrefix(kind, "Float64") {
				return true
			}
			unit := ""
			for _, a := range call.Args[1:] {
				if c, ok := a.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" {
						unit, _ = strconv.Unquote(c.Args[0].(*ast.BasicLit).Value)
					}
				}
			}
			addSeries(series, name, unit, kind)
			return true
		})
	}
	if len(series) < 20 {
		t.Fatalf("read %d series from %s: the instruments were not found", len(series), otlpDir)
	}
	return series, labels
}

// helper is a local function that makes one kind of instrument: its kind
// (the result type's name), its unit when it writes one (WithUnit of a
// literal), else the index of its unit parameter.
type helper struct {
	kind, unit string
	unitArg    int
}

// instrumentHelpers finds f's helpers: `name := func(…) metric.Kind {…}`.
func instrumentHelpers(f *ast.File) map[string]helper {
	hs := map[string]helper{}
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		id, ok := as.Lhs[0].(*ast.Ident)
		fn, ok2 := as.Rhs[0].(*ast.FuncLit)
		if !ok || !ok2 || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
			return true
		}
		sel, ok := fn.Type.Results.List[0].Type.(*ast.SelectorExpr)
		if !ok || (!strings.HasPrefix(sel.Sel.Name, "Int64") && !strings.HasPrefix(sel.Sel.Name, "Float64")) {
			return true
		}
		h := helper{kind: sel.Sel.Name, unitArg: -1}
		i := 0
		for _, field := range fn.Type.Params.List {
			for _, name := range field.Names {
				if name.Name == "unit" {
					h.unitArg = i
				}
				i++
			}
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" && len(c.Args) == 1 {
					if u := stringArg(c.Args[0]); u != "" {
						h.unit = u
					}
				}
			}
			return true
		})
		hs[id.Name] = h
		return true
	})
	return hs
}

// stringArg is e's value when it is a string literal, else "".
func stringArg(e ast.Expr) string {
	if v, ok := e.(*ast.BasicLit); ok && v.Kind == token.STRING {
		s, _ := strconv.Unquote(v.Value)
		return s
	}
	return ""
}

// addSeries adds the Prometheus series a metric of the instrument kind
// (Int64Counter, Float64Histogram, or the SDK's InstrumentKind name
// without its prefix) exports as.
func addSeries(series map[string]string, name, unit, kind string) {
	base := promName(name)
	if unit == "s" {
		base += "_seconds"
	}
	switch {
	case strings.HasSuffix(kind, "Histogram"):
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			series[base+s] = name
		}
	case strings.HasSuffix(kind, "UpDownCounter"), strings.HasSuffix(kind, "Gauge"):
		series[base] = name
	case strings.HasSuffix(kind, "Counter"):
		series[base+"_total"] = name
	}
}

func promName(s string) string { return strings.ReplaceAll(s, ".", "_") }

type panel struct {
	Type, Title string
	Datasource  struct{ UID string }
	Targets     []struct{ Expr string }
	Panels      []panel
}

// The pieces of PromQL the dashboard's queries use: strings, by/without
// clauses, label matchers, range selectors, Grafana's label_values(metric,
// label), and identifiers (a function when followed by "(", a variable
// when it starts with "$", else a metric).
var (
	stringLit   = regexp.MustCompile(`"[^"]*"`)
	labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
	byClause    = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	identifier  = regexp.MustCompile(`\$?\b[a-zA-Z_][a-zA-Z0-9_]*\b\s*\(?`)
)

// promqlKeywords are the functions and keywords the queries may use.
var promqlKeywords = []string{"sum", "max", "min", "avg", "rate", "increase", "histogram_quantile", "by", "without"}

// names returns the metric names and the label names an expression uses.
func names(expr string) (metrics, labels []string) {
	e := stringLit.ReplaceAllString(expr, `""`)
	if m := labelValues.FindStringSubmatch(e); m != nil {
		return []string{m[1]}, []string{m[2]}
	}
	for _, m := range byClause.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	e = byClause.ReplaceAllString(e, " ")
	for _, m := range matcher.FindAllStringSubmatch(e, -1) {
		labels = append(labels, m[1])
	}
	e = matcher.ReplaceAllString(e, " ")
	e = rangeSel.ReplaceAllString(e, " ")
	for _, id := range identifier.FindAllString(e, -1) {
		id = strings.TrimSpace(id)
		if strings.HasPrefix(id, "$") || strings.HasSuffix(id, "(") {
			continue
		}
		metrics = append(metrics, id)
	}
	return metrics, labels
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("llmgw.grafana.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title, UID    string
		SchemaVersion int
		Panels        []panel
		Templating    struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("llmgw.grafana.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Fatalf("title %q uid %q schemaVersion %d", d.Title, d.UID, d.SchemaVersion)
	}
	series, labels := exported(t)
	// Labels every Prometheus-compatible backend adds, and histograms' le.
	for _, l := range []string{"le", "job", "instance", "service_name"} {
		labels[l] = true
	}
	var exprs []string
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			exprs = append(exprs, q["query"].(string))
		}
	}
	used := map[string]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: data source %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				exprs = append(exprs, q.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, e := range exprs {
		ms, ls := names(e)
		if len(ms) == 0 {
			t.Errorf("%q names no metric", e)
		}
		for _, m := range ms {
			if slices.Contains(promqlKeywords, m) {
				continue
			}
			if _, ok := series[m]; !ok {
				t.Errorf("%q queries %s, which the gateway does not export", e, m)
			}
			used[series[m]] = true
		}
		for _, l := range ls {
			if !labels[l] {
				t.Errorf("%q uses label %s, which no metric carries", e, l)
			}
		}
	}
	// Every metric the gateway exports has a panel.
	for _, name := range series {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// TestNames checks the query reader on its own.
func TestNames(t *testing.T) {
	t.Parallel()
	m, l := names(`histogram_quantile(0.95, sum by (le, gen_ai_request_model) (rate(x_bucket{llmgw_tenant_id=~"$tenant", error_type!=""}[$__rate_interval])))`)
	if !slices.Equal(m, []string{"x_bucket"}) || !slices.Equal(l, []string{"le", "gen_ai_request_model", "llmgw_tenant_id", "error_type"}) {
		t.Fatalf("metrics %v labels %v", m, l)
	}
}
