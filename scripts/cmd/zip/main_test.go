package main

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// files writes name → body files under a temp dir, each with the given
// mode, and returns the dir.
func files(t *testing.T, modes map[string]fs.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for name, mode := range modes {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("body of "+name), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // umask-proof
			t.Fatal(err)
		}
	}
	return dir
}

func TestPackageEntries(t *testing.T) {
	t.Parallel()
	// bootstrap is written without the execute bit: the package must
	// still be runnable by Lambda.
	dir := files(t, map[string]fs.FileMode{"build/bootstrap": 0o600, "conf/gateway.yaml": 0o600, "tool": 0o700})
	out := filepath.Join(dir, "out.zip")
	err := run([]string{"-o", out,
		"bootstrap=" + filepath.Join(dir, "build/bootstrap"),
		"gateway.yaml=" + filepath.Join(dir, "conf/gateway.yaml"),
		"bin/tool=" + filepath.Join(dir, "tool"),
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, body string
		mode       fs.FileMode
	}{
		{"bootstrap", "body of build/bootstrap", 0o755},
		{"gateway.yaml", "body of conf/gateway.yaml", 0o644},
		{"bin/tool", "body of tool", 0o755},
	}
	if len(zr.File) != len(want) {
		t.Fatalf("%d entries, want %d", len(zr.File), len(want))
	}
	for i, w := range want {
		f := zr.File[i]
		t.Run(w.name, func(t *testing.T) {
			if f.Name != w.name || f.Mode() != w.mode {
				t.Errorf("entry %d: %s %v, want %s %v", i, f.Name, f.Mode(), w.name, w.mode)
			}
			if f.CreatorVersion>>8 != 3 {
				t.Errorf("creator system %d, want Unix (3), or unzip ignores the mode", f.CreatorVersion>>8)
			}
			if !f.Modified.Equal(modTime) || f.Method != zip.Deflate {
				t.Errorf("time %v method %d", f.Modified, f.Method)
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if got, _ := io.ReadAll(rc); string(got) != w.body {
				t.Errorf("body %q", got)
			}
		})
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode %v %v", fi.Mode(), err)
	}
}

// TestPackageDeterministic: the same inputs give the same bytes whatever
// the files' times and the build machine's umask.
func TestPackageDeterministic(t *testing.T) {
	t.Parallel()
	dir := files(t, map[string]fs.FileMode{"bootstrap": 0o755})
	boot := filepath.Join(dir, "bootstrap")
	zipOnce := func(name string) []byte {
		out := filepath.Join(dir, name)
		if err := run([]string{"-o", out, "bootstrap=" + boot}, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := zipOnce("a.zip")
	if err := os.Chtimes(boot, time.Now(), time.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(boot, 0o700); err != nil {
		t.Fatal(err)
	}
	if b := zipOnce("b.zip"); !bytes.Equal(a, b) {
		t.Fatal("two packages of the same file differ")
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	dir := files(t, map[string]fs.FileMode{"f": 0o644})
	f := filepath.Join(dir, "f")
	out := filepath.Join(dir, "out.zip")
	tests := []struct {
		name string
		args []string
	}{
		{"no output", []string{f}},
		{"no files", []string{"-o", out}},
		{"absolute name", []string{"-o", out, f}},
		{"escaping name", []string{"-o", out, "../f=" + f}},
		{"unclean name", []string{"-o", out, "a//f=" + f}},
		{"twice", []string{"-o", out, "f=" + f, "f=" + f}},
		{"missing file", []string{"-o", out, "g=" + filepath.Join(dir, "nope")}},
		{"directory", []string{"-o", out, "d=" + dir}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := run(tt.args, io.Discard); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("wrote an archive anyway")
			}
		})
	}
}
