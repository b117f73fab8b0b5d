// Package image writes the gateway's multi-arch container image as an OCI
// image layout directory, without a container engine: an index of one
// manifest per architecture, each on scratch with the static binary at
// /gateway, the build machine's CA bundle, and an /etc/passwd that names the
// nonroot user 65532. scripts/cmd/image is its command line (`make image`).
//
// The layout is reproducible: file times are fixed (Options.Created, the
// Unix epoch by default), entries are sorted, gzip carries no name or time,
// so the same inputs give the same digests.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Image settings every manifest carries; the bicep templates and tests check
// against the same values.
const (
	Entrypoint = "/gateway"
	User       = "65532:65532"
	Port       = "8080"
	CAPath     = "etc/ssl/certs/ca-certificates.crt"
)

// OCI media types (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Binary is one architecture's static gateway executable.
type Binary struct {
	OS, Arch, Path string
}

// Options says what to build. Created's zero value is the Unix epoch.
type Options struct {
	Out      string
	Binaries []Binary
	CACerts  string
	Tag      string
	Created  time.Time
}

// ManifestInfo describes one written platform manifest.
type ManifestInfo struct {
	OS, Arch                 string
	Digest                   string
	Compressed, Uncompressed int64 // sums over the manifest's layers
}

// Result is what Build wrote.
type Result struct {
	Index     string // digest of the image index the layout's index.json points at
	Manifests []ManifestInfo
	DiskBytes int64 // all blobs
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Variant      string          `json:"variant,omitempty"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
	History      []history       `json:"history"`
}

type containerConfig struct {
	User         string              `json:"User"`
	Entrypoint   []string            `json:"Entrypoint"`
	Env          []string            `json:"Env"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	WorkingDir   string              `json:"WorkingDir"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// layout writes content-addressed blobs under dir/blobs/sha256.
type layout struct {
	dir  string
	disk int64
	seen map[string]bool
}

func (l *layout) blob(b []byte) (string, int64, error) {
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	if !l.seen[hexSum] {
		if err := os.WriteFile(filepath.Join(l.dir, "blobs", "sha256", hexSum), b, 0o644); err != nil {
			return "", 0, err
		}
		l.seen[hexSum] = true
		l.disk += int64(len(b))
	}
	return "sha256:" + hexSum, int64(len(b)), nil
}

func (l *layout) json(v any) (string, int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", 0, err
	}
	return l.blob(b)
}

// Build writes the OCI image layout described by o.
func Build(o Options) (*Result, error) {
	if o.Tag == "" {
		o.Tag = "latest"
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", o.CACerts)
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	l := &layout{dir: o.Out, seen: map[string]bool{}}
	if err := os.MkdirAll(filepath.Join(o.Out, "blobs", "sha256"), 0o755); err != nil {
		return nil, err
	}

	// The base layer is the same for every architecture, so it is stored once.
	base, err := tarGz(o.Created, baseFiles(ca))
	if err != nil {
		return nil, err
	}
	baseDigest, baseSize, err := l.blob(base.gz)
	if err != nil {
		return nil, err
	}
	created := o.Created.Format(time.RFC3339)
	res := &Result{}
	idx := index{SchemaVersion: 2, MediaType: mediaIndex}
	seenPlat := map[string]bool{}
	for _, b := range o.Binaries {
		if seenPlat[b.OS+"/"+b.Arch] {
			return nil, fmt.Errorf("%s/%s given twice", b.OS, b.Arch)
		}
		seenPlat[b.OS+"/"+b.Arch] = true
		exe, err := readStatic(b)
		if err != nil {
			return nil, err
		}
		app, err := tarGz(o.Created, []file{{name: "gateway", mode: 0o755, body: exe}})
		if err != nil {
			return nil, err
		}
		appDigest, appSize, err := l.blob(app.gz)
		if err != nil {
			return nil, err
		}
		cfg := imageConfig{
			Created: created, Architecture: b.Arch, OS: b.OS, Variant: variant(b.Arch),
			Config: containerConfig{
				User:         User,
				Entrypoint:   []string{Entrypoint},
				Env:          []string{"PORT=" + Port, "SSL_CERT_FILE=/" + CAPath},
				ExposedPorts: map[string]struct{}{Port + "/tcp": {}},
				WorkingDir:   "/",
			},
			RootFS: rootFS{Type: "layers", DiffIDs: []string{base.diffID, app.diffID}},
			History: []history{
				{Created: created, CreatedBy: "scripts/image: CA certificates, /etc/passwd (nonroot 65532)"},
				{Created: created, CreatedBy: "scripts/image: /gateway"},
			},
		}
		cfgDigest, cfgSize, err := l.json(cfg)
		if err != nil {
			return nil, err
		}
		m := manifest{
			SchemaVersion: 2, MediaType: mediaManifest,
			Config: descriptor{MediaType: mediaConfig, Digest: cfgDigest, Size: cfgSize},
			Layers: []descriptor{
				{MediaType: mediaLayer, Digest: baseDigest, Size: baseSize},
				{MediaType: mediaLayer, Digest: appDigest, Size: appSize},
			},
		}
		mDigest, mSize, err := l.json(m)
		if err != nil {
			return nil, err
		}
		idx.Manifests = append(idx.Manifests, descriptor{
			MediaType: mediaManifest, Digest: mDigest, Size: mSize,
			Platform: &platform{Architecture: b.Arch, OS: b.OS, Variant: variant(b.Arch)},
		})
		res.Manifests = append(res.Manifests, ManifestInfo{
			OS: b.OS, Arch: b.Arch, Digest: mDigest,
			Compressed: baseSize + appSize, Uncompressed: base.raw + app.raw,
		})
	}
	idxDigest, idxSize, err := l.json(idx)
	if err != nil {
		return nil, err
	}
	res.Index = idxDigest
	// index.json names the multi-arch index, as `docker buildx --output
	// type=oci` and ko do, so tools select it by tag and push it whole.
	top := index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{{
		MediaType: mediaIndex, Digest: idxDigest, Size: idxSize,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": o.Tag},
	}}}
	topJSON, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "index.json"), topJSON, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return nil, err
	}
	res.DiskBytes = l.disk
	return res, nil
}

// variant is the platform variant registries expect for arm64.
func variant(arch string) string {
	if arch == "arm64" {
		return "v8"
	}
	return ""
}

// elfMachine maps GOARCH to the ELF machine its binaries must carry.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// readStatic reads b's executable and checks that it is a static ELF for
// b.Arch: a scratch image has no dynamic loader or libc.
func readStatic(b Binary) ([]byte, error) {
	if b.OS != "linux" {
		return nil, fmt.Errorf("%s: os %q: only linux images are built", b.Path, b.OS)
	}
	want, ok := elfMachine[b.Arch]
	if !ok {
		return nil, fmt.Errorf("%s: arch %q: want amd64 or arm64", b.Path, b.Arch)
	}
	exe, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(exe))
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF executable: %w", b.Path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return nil, fmt.Errorf("%s: built for %s, not %s", b.Path, f.Machine, b.Arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s: dynamically linked; build with CGO_ENABLED=0", b.Path)
		}
	}
	return exe, nil
}

type file struct {
	name string // relative, no leading slash; a trailing slash makes a directory
	mode int64
	body []byte
}

// baseFiles is the scratch filesystem beside the binary.
func baseFiles(ca []byte) []file {
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: CAPath, mode: 0o644, body: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
}

type layer struct {
	gz     []byte
	diffID string // sha256 of the uncompressed tar
	raw    int64
}

// tarGz writes files in order as a tar with fixed owner and time, and
// gzips it with no name or time in the header.
func tarGz(mtime time.Time, files []file) (layer, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if f.name == "home/nonroot/" {
			h.Uid, h.Gid = 65532, 65532
		}
		if err := tw.WriteHeader(h); err != nil {
			return layer{}, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return layer{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return layer{}, err
	}
	sum := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return layer{}, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return layer{}, err
	}
	if err := zw.Close(); err != nil {
		return layer{}, err
	}
	return layer{gz: gz.Bytes(), diffID: "sha256:" + hex.EncodeToString(sum[:]), raw: int64(raw.Len())}, nil
}
