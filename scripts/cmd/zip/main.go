// Command zip writes a deterministic zip archive for an AWS Lambda
// deployment package: `make package-lambda` runs it in the build directory
// as
//
//	go run ./scripts/cmd/zip -o ../gateway-lambda-arm64.zip bootstrap gateway.yaml=../../../infra/gateway.yaml
//
// Each argument is a file to store under its own name, or NAME=PATH to store
// PATH as NAME (a config file that lives elsewhere). Lambda's provided.al2023
// runtime executes /var/task/bootstrap, so the archive keeps Unix modes:
// bootstrap and any other executable as 0755, the rest as 0644. Every entry
// gets the same fixed time and the entries keep the order given, so the
// same inputs always give the same bytes (and the same CodeSha256).
package main

import (
	"archive/zip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// modTime is the time stored for every entry: the earliest a zip's MS-DOS
// date can hold, as reproducible-build tools use.
var modTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

var errUsage = errors.New("usage: zip -o OUT.zip FILE|NAME=PATH [FILE|NAME=PATH]")

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "zip:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fset := flag.NewFlagSet("zip", flag.ContinueOnError)
	fset.SetOutput(stderr)
	out := fset.String("o", "", "the archive to write (required)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *out == "" || fset.NArg() == 0 {
		return errUsage
	}
	entries, err := parseEntries(fset.Args())
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".zip-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp, entries); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), *out)
}

// entry is one file to store: Name in the archive, read from Path.
type entry struct{ Name, Path string }

func parseEntries(args []string) ([]entry, error) {
	seen := map[string]bool{}
	var es []entry
	for _, a := range args {
		name, p, ok := strings.Cut(a, "=")
		if !ok {
			name, p = filepath.ToSlash(filepath.Clean(a)), a
		}
		if name == "" || p == "" || path.IsAbs(name) || name != path.Clean(name) || strings.HasPrefix(name, "../") || name == ".." {
			return nil, fmt.Errorf("%q: the name in the archive must be a relative path inside it", a)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q stored twice", name)
		}
		seen[name] = true
		es = append(es, entry{name, p})
	}
	return es, nil
}

// write stores entries in w, deflated, with fixed times and Unix modes.
func write(w io.Writer, entries []entry) error {
	zw := zip.NewWriter(w)
	for _, e := range entries {
		if err := add(zw, e); err != nil {
			return err
		}
	}
	return zw.Close()
}

func add(zw *zip.Writer, e entry) error {
	f, err := os.Open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", e.Path)
	}
	h := &zip.FileHeader{Name: e.Name, Method: zip.Deflate, Modified: modTime}
	h.SetMode(modeFor(e.Name, fi.Mode()))
	dst, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, f); err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	return nil
}

// modeFor is 0755 for bootstrap (Lambda runs it whatever the build left)
// and for any executable, else 0644: umask and checkout modes never leak
// into the package.
func modeFor(name string, m fs.FileMode) fs.FileMode {
	if path.Base(name) == "bootstrap" || m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}
