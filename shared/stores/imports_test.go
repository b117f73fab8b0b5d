package stores

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOnlyStoresImportGoRedis: the Redis client is this package tree's
// alone. Every other part gets its store as the interface it declares
// (Open hands them out), so no product file outside shared/stores may
// import go-redis; tests may, to reach a redis-server directly.
func TestOnlyStoresImportGoRedis(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", "..")) // go test runs in the package's directory
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	const goRedis = "github.com/redis/go-redis/v9"
	stores := filepath.Join(root, "shared", "stores") + string(filepath.Separator)
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, stores) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == goRedis || strings.HasPrefix(p, goRedis+"/") {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: only shared/stores may; take the part's store from stores.Open", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
