// Package docs holds the tests that keep the documentation true: every
// relative link in README.md and docs/*.md resolves (file and heading), and
// every key of the config schema has its line in the configuration
// reference. The pages themselves are plain Markdown beside this file.
package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/config"
)

// pages lists the README and every page under docs/ (subfolders included),
// as paths relative to the repository root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.ToSlash(filepath.Join("docs", p)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fence   = regexp.MustCompile("(?ms)^```.*?^```[^\n]*$")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	scheme  = regexp.MustCompile(`^[a-z]+:`)
)

// anchors are the heading ids GitHub gives a page: lower case, punctuation
// dropped, spaces as hyphens, a repeated id suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestLinksResolve: every relative link of every page names a file or
// folder of the repository and, with a #fragment into a Markdown page, one
// of that page's headings. Links inside code blocks are code, not links.
func TestLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		t.Run(page, func(t *testing.T) {
			text := read(t, page)
			for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue // http:, https:, mailto:
				}
				file, frag, _ := strings.Cut(target, "#")
				resolved := page
				if file != "" {
					resolved = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
					if _, err := os.Stat(filepath.Join("..", resolved)); err != nil {
						t.Errorf("%s: link %q: no such file %s", page, target, resolved)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(resolved, ".md") && !anchors(read(t, resolved))[frag] {
					t.Errorf("%s: link %q: %s has no heading #%s", page, target, resolved, frag)
				}
			}
		})
	}
}

// TestNoConflictMarkers: a merge once left both sides of a table in the
// README; the documentation is checked as the code is.
func TestNoConflictMarkers(t *testing.T) {
	for _, page := range pages(t) {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, marker := range []string{"<<<<<<< ", "=======", ">>>>>>> "} {
				if line == marker || (marker != "=======" && strings.HasPrefix(line, marker)) {
					t.Errorf("%s:%d: merge conflict marker %q", page, i+1, line)
				}
			}
		}
	}
}

// schemaKeys lists every key of config.Config by its path as the reference
// writes it: auth.issuer, tenants[].models, pools[].endpoints[].url. A
// mapping of free keys (a map) is one key; so is a duration.
func schemaKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if tag == "" && f.Anonymous {
			schemaKeys(f.Type, prefix, out)
			continue
		}
		path := prefix + tag
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]():
			schemaKeys(ft, path+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			schemaKeys(ft.Elem(), path+"[].", out)
		default:
			*out = append(*out, path)
		}
	}
}

// TestConfigReferenceNamesEveryKey: each key the schema accepts appears,
// in backticks by its whole path, in docs/configuration.md, so a field added
// to config.Config without its line in the reference fails the tests.
func TestConfigReferenceNamesEveryKey(t *testing.T) {
	var keys []string
	schemaKeys(reflect.TypeFor[config.Config](), "", &keys)
	if len(keys) < 50 {
		t.Fatalf("the schema walk found only %d keys: %v", len(keys), keys)
	}
	ref := read(t, "docs/configuration.md")
	for _, k := range keys {
		if !strings.Contains(ref, "`"+k+"`") {
			t.Errorf("docs/configuration.md does not name `%s`", k)
		}
	}
}
