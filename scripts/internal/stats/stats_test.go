package stats

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	floats := []struct {
		name        string
		in          []float64
		med, lo, hi float64
	}{
		{"one", []float64{7}, 7, 7, 7},
		{"odd", []float64{3, 1, 2}, 2, 1, 3},
		{"even", []float64{4, 1, 2, 3}, 2.5, 1, 4},
	}
	for _, tt := range floats {
		t.Run("float/"+tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			med, lo, hi := Median(in)
			if med != tt.med || lo != tt.lo || hi != tt.hi {
				t.Errorf("Median(%v) = %v %v %v", tt.in, med, lo, hi)
			}
			for i := range in {
				if in[i] != tt.in[i] {
					t.Fatalf("Median sorted its argument: %v", in)
				}
			}
		})
	}
	durations := []struct {
		name        string
		in          []time.Duration
		med, lo, hi time.Duration
	}{
		{"odd", []time.Duration{3, 1, 2}, 2, 1, 3},
		{"even", []time.Duration{4, 1, 2, 3}, 2, 1, 4},
	}
	for _, tt := range durations {
		t.Run("duration/"+tt.name, func(t *testing.T) {
			med, lo, hi := Median(tt.in)
			if med != tt.med || lo != tt.lo || hi != tt.hi {
				t.Errorf("Median(%v) = %v %v %v", tt.in, med, lo, hi)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		Median([]float64{})
	})
}
