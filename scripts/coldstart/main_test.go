package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRun measures one cold start per host with the real binary and checks
// the table: four rows, each with positive, ordered numbers.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the gateway binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-n", "2"}, &out, io.Discard); err != nil {
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
	for _, args := range [][]string{{"-n", "0"}, {"-nope"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name        string
		in          []time.Duration
		med, lo, hi time.Duration
	}{
		{"odd", []time.Duration{3, 1, 2}, 2, 1, 3},
		{"even", []time.Duration{4, 1, 2, 3}, 2, 1, 4},
		{"one", []time.Duration{7}, 7, 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			med, lo, hi := summary(tt.in)
			if med != tt.med || lo != tt.lo || hi != tt.hi {
				t.Errorf("summary(%v) = %v %v %v", tt.in, med, lo, hi)
			}
		})
	}
}

func leq(a, b string) bool {
	x, errx := strconv.ParseFloat(a, 64)
	y, erry := strconv.ParseFloat(b, 64)
	return errx == nil && erry == nil && x <= y
}
