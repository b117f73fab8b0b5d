// Command image writes the gateway's multi-arch container image as an OCI
// image layout directory (package scripts/image), without a container
// engine:
//
//	go run ./scripts/cmd/image -out bin/oci \
//	  -bin linux/amd64=bin/gateway-linux-amd64 \
//	  -bin linux/arm64=bin/gateway-linux-arm64
//
// Push it with any registry client that reads OCI layouts, for example
// `crane push bin/oci REGISTRY/gateway:TAG` or
// `skopeo copy --all oci:bin/oci:latest docker://REGISTRY/gateway:TAG`.
//
// File times are SOURCE_DATE_EPOCH when set, else the Unix epoch, so the
// same inputs give the same digests.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/scripts/image"
)

func main() {
	if err := run(os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// binFlags collects repeated -bin os/arch=path flags.
type binFlags []image.Binary

func (b *binFlags) String() string { return fmt.Sprint(*b) }

func (b *binFlags) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || path == "" {
		return fmt.Errorf("%q: want os/arch=path, e.g. linux/amd64=bin/gateway-linux-amd64", v)
	}
	*b = append(*b, image.Binary{OS: osName, Arch: arch, Path: path})
	return nil
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o image.Options
	var bins binFlags
	fs.StringVar(&o.Out, "out", "bin/oci", "output directory (replaced)")
	fs.Var(&bins, "bin", "os/arch=path of a static gateway binary (repeat per architecture)")
	fs.StringVar(&o.CACerts, "ca", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to copy to /etc/ssl/certs/ca-certificates.crt")
	fs.StringVar(&o.Tag, "tag", "latest", "org.opencontainers.image.ref.name of the index")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if len(bins) == 0 {
		return fmt.Errorf("no -bin given")
	}
	o.Binaries = bins
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	res, err := image.Build(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: index %s (%s)\n", o.Out, res.Index, o.Tag)
	for _, m := range res.Manifests {
		fmt.Fprintf(stdout, "  %s/%s  manifest %s  layers %d B compressed, %d B uncompressed\n",
			m.OS, m.Arch, m.Digest, m.Compressed, m.Uncompressed)
	}
	fmt.Fprintf(stdout, "layout on disk: %d B\n", res.DiskBytes)
	return nil
}
