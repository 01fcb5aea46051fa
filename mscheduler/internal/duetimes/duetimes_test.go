package duetimes

import (
	"testing"
	"time"
)

// TestTimesAreKeptOnceAndEarliestFirst: an idle worker learns the same
// next due time at every poll, and a time learned again is kept once; a
// full heap keeps the earliest times, so that a sooner one (a retry, the
// end of a hold) is never dropped for later ones.
func TestTimesAreKeptOnceAndEarliestFirst(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var h Heap
	for range 2 * Max {
		h.Add(t0.Add(time.Hour))
	}
	if h.Len() != 1 {
		t.Fatalf("one time added %d times is held %d times, want once", 2*Max, h.Len())
	}
	for i := range Max {
		h.Add(t0.Add(time.Duration(i+2) * time.Hour))
	}
	if h.Len() != Max {
		t.Fatalf("holds %d times, want %d", h.Len(), Max)
	}
	h.Add(t0.Add(time.Minute))
	if d, _ := h.Peek(); !d.Equal(t0.Add(time.Minute)) {
		t.Fatalf("full, a sooner time was dropped: the first is %v", d)
	}
	h.Add(t0.Add(1000 * time.Hour))
	for _, d := range h.times {
		if d.After(t0.Add(time.Duration(Max) * time.Hour)) {
			t.Fatalf("full, kept %v past the earliest %d", d, Max)
		}
	}
	h.PopDue(t0.Add(90 * time.Minute))
	if d, _ := h.Peek(); !d.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("after the first two were due, the first is %v", d)
	}
}
