package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkSchema walks the YAML document against Config's yaml tags and
// reports, by field path, every key the schema lacks, every key written
// twice and every value that does not decode into its field's type. The
// yaml package's own strict mode names Go types ("field foo not found in
// type config.Upstream") and stops at the first unknown key; this names the
// field the operator wrote ("auth.foo: unknown field") and lists them all.
func checkSchema(doc *yaml.Node) Problems {
	w := schemaWalker{}
	w.walk(doc, reflect.TypeFor[Config](), "")
	return w.p
}

// maxSchemaNodes bounds the walk: aliases can make a small document
// expand to a large tree, and the yaml decoder refuses that anyway.
const maxSchemaNodes = 1 << 16

type schemaWalker struct {
	p        Problems
	reported map[string]bool // each problem once: aliases reach a node by several paths
	nodes    int
	merging  map[*yaml.Node]bool // mappings being merged, to stop cycles
}

// topLevel names the document itself in a problem.
const topLevel = "(top level)"

// add reports a problem at path, once: a node reached again through an
// alias or a merge (a mapping that merges itself by two routes) gives the
// same line again, which says nothing new.
func (w *schemaWalker) add(path, format string, a ...any) {
	if path == "" {
		path = topLevel
	}
	line := path + ": " + fmt.Sprintf(format, a...)
	if w.reported[line] {
		return
	}
	if w.reported == nil {
		w.reported = map[string]bool{}
	}
	w.reported[line] = true
	w.p = append(w.p, line)
}

// spend counts one node against maxSchemaNodes; false when it is spent
// (reported once).
func (w *schemaWalker) spend() bool {
	if w.nodes++; w.nodes == maxSchemaNodes+1 {
		w.add("parse", "document too large (more than %d nodes, aliases expanded)", maxSchemaNodes)
	}
	return w.nodes <= maxSchemaNodes
}

func (w *schemaWalker) walk(n *yaml.Node, t reflect.Type, path string) {
	if !w.spend() {
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			w.walk(c, t, path)
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.add(path, "must be a mapping of fields, not %s (line %d)", describe(n), n.Line)
			return
		}
		w.fields(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.add(path, "must be a list, not %s (line %d)", describe(n), n.Line)
			return
		}
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.add(path, "must be a mapping, not %s (line %d)", describe(n), n.Line)
			return
		}
		w.entries(n, path, func(key *yaml.Node, v *yaml.Node) {
			w.walk(key, t.Key(), join(path, key.Value))
			w.walk(v, t.Elem(), join(path, key.Value))
		})
	default:
		if t == reflect.TypeFor[time.Duration]() {
			t = reflect.TypeFor[Duration]() // a part's duration reads as the file's
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			w.add(path, "%s", typeErrorText(err))
		}
	}
}

// fields checks a mapping against struct type t.
func (w *schemaWalker) fields(n *yaml.Node, t reflect.Type, path string) {
	w.entries(n, path, func(key, v *yaml.Node) {
		p := join(path, key.Value)
		ft, ok := fieldType(t, key.Value)
		if !ok {
			w.add(p, "unknown field (line %d)", key.Line)
			return
		}
		w.walk(v, ft, p)
	})
}

// entries calls f for each key and value of mapping n, merge keys ("<<",
// YAML 1.1) expanded. A key written twice is reported and its second entry
// dropped from n, so that the decoder still fills in the rest of the
// mapping (it would otherwise skip the whole mapping, and every field in it
// would read as missing).
func (w *schemaWalker) entries(n *yaml.Node, path string, f func(key, v *yaml.Node)) {
	seen := make(map[string]int, len(n.Content)/2)
	kept := n.Content[:0:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i], n.Content[i+1]
		if isMergeKey(key) {
			kept = append(kept, key, v)
			w.merge(v, path, f, false)
			continue
		}
		if line, dup := seen[key.Value]; dup {
			w.add(join(path, key.Value), "written twice (lines %d and %d)", line, key.Line)
			continue
		}
		seen[key.Value] = key.Line
		kept = append(kept, key, v)
		f(key, v)
	}
	n.Content = kept
}

// merge expands a merge key's value: a mapping (whose own merge keys are
// expanded in turn) or a list of mappings. Merged keys may be overridden, so
// they are not checked for duplicates. A mapping that merges itself, through
// an alias, is reported rather than followed for ever.
func (w *schemaWalker) merge(v *yaml.Node, path string, f func(key, v *yaml.Node), inList bool) {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if !w.spend() {
		return
	}
	switch {
	case v.Kind == yaml.MappingNode:
		if w.merging[v] {
			w.add(path, "<< merges a mapping into itself (line %d)", v.Line)
			return
		}
		if w.merging == nil {
			w.merging = map[*yaml.Node]bool{}
		}
		w.merging[v] = true
		defer delete(w.merging, v)
		for i := 0; i+1 < len(v.Content); i += 2 {
			if isMergeKey(v.Content[i]) {
				w.merge(v.Content[i+1], path, f, false)
			} else {
				f(v.Content[i], v.Content[i+1])
			}
		}
	case v.Kind == yaml.SequenceNode && !inList:
		for _, m := range v.Content {
			w.merge(m, path, f, true)
		}
	default:
		w.add(path, "<< must merge a mapping or a list of mappings, not %s (line %d)", describe(v), v.Line)
	}
}

func isMergeKey(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

// fieldType finds the field of struct t that yaml decodes key into,
// following inline (embedded) structs.
func fieldType(t reflect.Type, key string) (ft reflect.Type, ok bool) {
	eachField(t, "", func(_ int, f reflect.StructField, p string) {
		switch {
		case ok:
		case p == "": // an inline struct
			ft, ok = fieldType(f.Type, key)
		case p == key:
			ft, ok = f.Type, true
		}
	})
	return ft, ok
}

// eachField calls fn for each field of struct t that yaml reads, with the
// field's path under path as a config writes it: its yaml name (default the
// lower-cased Go name), and the fields of an inline struct as its own.
func eachField(t reflect.Type, path string, fn func(i int, f reflect.StructField, p string)) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(flags, "inline") {
			fn(i, f, path)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fn(i, f, join(path, name))
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

var linePrefix = regexp.MustCompile(`^line (\d+): (.*)$`)

// typeErrorText turns the yaml package's "line 3: cannot unmarshal ..." into
// "cannot unmarshal ... (line 3)": the field path leads the problem.
func typeErrorText(err error) string {
	msgs := []string{err.Error()}
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	}
	for i, m := range msgs {
		if s := linePrefix.FindStringSubmatch(m); s != nil {
			msgs[i] = s[2] + " (line " + s[1] + ")"
		}
	}
	return strings.Join(msgs, "; ")
}
