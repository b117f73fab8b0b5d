package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
)

// TestRun measures one cold start per host with the real binary and checks
// the table: four rows, each with positive, ordered numbers.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the gateway binary")
	}
	bin := lambdatest.BuildTestBinary(t, "github.com/llmgw/gateway/functions/gateway", "lambda.norpc")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-n", "2", "-gateway", bin}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^\| (Lambda \(Runtime API\)|HTTP) \| .+ \| ([0-9.]+) ms \| ([0-9.]+) ms \| ([0-9.]+) ms \|$`).FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 rows:\n%s", out.String())
	}
	for _, r := range rows {
		if r[3] == "0.0" || !(leq(r[3], r[2]) && leq(r[2], r[4])) {
			t.Errorf("row %q: want 0 < min <= median <= max", r[0])
		}
	}
	if !strings.Contains(out.String(), "| --- |") {
		t.Errorf("not a markdown table:\n%s", out.String())
	}
}

func TestRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-nope"}, {"extra"}, {"-gateway", filepath.Join(t.TempDir(), "missing")}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
				t.Errorf("%q accepted", args)
			}
		})
	}
}

func leq(a, b string) bool {
	x, errx := strconv.ParseFloat(a, 64)
	y, erry := strconv.ParseFloat(b, 64)
	return errx == nil && erry == nil && x <= y
}
