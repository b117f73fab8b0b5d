// Package otelcoltest starts a real OpenTelemetry Collector for tests: the
// one in scripts/otelcol (the collector's own OTLP receiver, and an
// exporter that appends each batch as OTLP JSON to a file), built once per
// source version and started on loopback. Tests point the gateway's
// OTEL_EXPORTER_OTLP_ENDPOINT at URL and read what the collector received.
package otelcoltest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Collector is a running collector.
type Collector struct {
	// URL is the OTLP/HTTP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT).
	URL string
	// GRPCURL is the OTLP/gRPC endpoint (with
	// OTEL_EXPORTER_OTLP_PROTOCOL=grpc), as the Azure Container Apps
	// managed agent's is given to an app.
	GRPCURL string
	file    string
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds scripts/otelcol (once per process) and returns its path.
// The binary is kept in the repository's own ignored bin/otelcol, under a
// name that hashes its sources, so a later run, or another test binary of
// the same run, skips the build; never in the temporary directory, which a
// fresh machine does not share with an earlier run. A lock file beside it
// makes every builder wait for the one already building (make test starts
// one in the background, scripts/cmd/otelcolbuild, before the tests run),
// so the collector is built once per run however many packages need it.
func Binary() (string, error) {
	buildOnce.Do(func() { binPath, buildErr = build() })
	return binPath, buildErr
}

func build() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "scripts", "otelcol")
	// Every file the build reads: the module's two files and its Go sources.
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range append([]string{filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")}, files...) {
		h.Write([]byte(filepath.Base(f)))
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	dir := filepath.Join(root, "bin", "otelcol")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("the collector's folder: %w", err)
	}
	bin := filepath.Join(dir, "otelcol-"+hex.EncodeToString(h.Sum(nil))[:16])
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("the collector's build lock: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := bin + ".tmp" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the collector: %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// repoRoot is the folder above the test's working directory (go test
// runs in the package's folder) that holds scripts/otelcol. It is found
// from the working directory, not from runtime.Caller: under -trimpath
// (make test) a caller's file is a module path, not a file.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "otelcol", "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("otelcoltest: no scripts/otelcol above the working directory")
		}
		dir = up
	}
}

// Start builds (if needed) and starts a collector on a free loopback port;
// it is stopped when the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	addr, grpcAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	c := &Collector{URL: "http://" + addr, GRPCURL: "http://" + grpcAddr + "/", file: filepath.Join(dir, "otlp.jsonl")}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
      grpc:
        endpoint: %q
exporters:
  jsonfile:
    path: %q
service:
  telemetry:
    logs: {level: warn}
    metrics: {level: none}
  pipelines:
    metrics: {receivers: [otlp], exporters: [jsonfile]}
    traces: {receivers: [otlp], exporters: [jsonfile]}
`, addr, grpcAddr, c.file)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	logf, err := os.Create(filepath.Join(dir, "otelcol.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if listening(addr) && listening(grpcAddr) {
			return c
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("collector exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("collector never listened")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr is a loopback address no one listens on (now).
func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func listening(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = conn.Close()
	}
	return err == nil
}

// Point is one metric data point as received.
type Point struct {
	Metric   string
	Attrs    map[string]string // values as strings ("8", "true")
	Resource map[string]string
	Int      int64   // a sum or gauge's integer value
	Double   float64 // a sum or gauge's double value
	Count    uint64  // a histogram's count
	Sum      float64 // a histogram's sum
}

// Span is one span as received.
type Span struct {
	TraceID, SpanID, ParentSpanID, Name string
	Kind                                int // 2 server, 3 client
	Attrs                               map[string]string
}

// Received reads every batch the collector has written so far.
func (c *Collector) Received() ([]Point, []Span, error) {
	f, err := os.Open(c.file)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var points []Point
	var spans []Span
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var doc otlpDoc
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			return nil, nil, fmt.Errorf("collector output: %w", err)
		}
		for _, rm := range doc.ResourceMetrics {
			res := attrs(rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					add := func(dps []dataPoint) {
						for _, dp := range dps {
							p := Point{Metric: m.Name, Attrs: attrs(dp.Attributes), Resource: res, Double: dp.AsDouble, Sum: dp.Sum}
							p.Int, _ = strconv.ParseInt(dp.AsInt, 10, 64)
							p.Count, _ = strconv.ParseUint(dp.Count, 10, 64)
							points = append(points, p)
						}
					}
					add(m.Sum.DataPoints)
					add(m.Gauge.DataPoints)
					add(m.Histogram.DataPoints)
				}
			}
		}
		for _, rs := range doc.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans = append(spans, Span{TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID,
						Name: s.Name, Kind: s.Kind, Attrs: attrs(s.Attributes)})
				}
			}
		}
	}
	return points, spans, sc.Err()
}

type otlpDoc struct {
	ResourceMetrics []struct {
		Resource     resource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []struct {
				Name      string `json:"name"`
				Sum       series `json:"sum"`
				Gauge     series `json:"gauge"`
				Histogram series `json:"histogram"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   resource `json:"resource"`
		ScopeSpans []struct {
			Spans []struct {
				TraceID      string     `json:"traceId"`
				SpanID       string     `json:"spanId"`
				ParentSpanID string     `json:"parentSpanId"`
				Name         string     `json:"name"`
				Kind         int        `json:"kind"`
				Attributes   []keyValue `json:"attributes"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type resource struct {
	Attributes []keyValue `json:"attributes"`
}

type series struct {
	DataPoints []dataPoint `json:"dataPoints"`
}

type dataPoint struct {
	Attributes []keyValue `json:"attributes"`
	AsInt      string     `json:"asInt"`
	AsDouble   float64    `json:"asDouble"`
	Count      string     `json:"count"`
	Sum        float64    `json:"sum"`
}

type keyValue struct {
	Key   string `json:"key"`
	Value struct {
		String *string  `json:"stringValue"`
		Int    *string  `json:"intValue"`
		Bool   *bool    `json:"boolValue"`
		Double *float64 `json:"doubleValue"`
	} `json:"value"`
}

func attrs(kvs []keyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.Value; {
		case v.String != nil:
			m[kv.Key] = *v.String
		case v.Int != nil:
			m[kv.Key] = *v.Int
		case v.Bool != nil:
			m[kv.Key] = strconv.FormatBool(*v.Bool)
		case v.Double != nil:
			m[kv.Key] = strconv.FormatFloat(*v.Double, 'g', -1, 64)
		}
	}
	return m
}
