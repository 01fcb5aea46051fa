package engine

import (
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
)

// TestGatheringWaitsForEndingRuns: with work waiting, a claim is held back
// while fewer than all the slots are free, and while runs of the consumer
// are writing their ends even with every slot free (the runs of one batched
// end free their slots together), but not past the window, and not without
// work waiting.
func TestGatheringWaitsForEndingRuns(t *testing.T) {
	c := &Engine{cfg: &Config{Capacity: 16, ClaimBatchMax: 64, ClaimBatchWindow: 5 * time.Millisecond},
		limiter: pressure.New(16, time.Now, nil)}
	st := &claimState{backlog: true}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if c.gathering(st, now) {
		t.Fatal("every slot free and no run ending: held back")
	}
	c.held.Store(4)
	if !c.gathering(st, now) {
		t.Fatal("12 of 16 slots free: not held back")
	}
	c.held.Store(0)
	c.ending.Store(2)
	if !c.gathering(st, now.Add(4*time.Millisecond)) {
		t.Fatal("2 runs writing their ends: not held back within the window")
	}
	if c.gathering(st, now.Add(5*time.Millisecond)) {
		t.Fatal("held back past the window")
	}
	st.backlog = false
	if c.gathering(st, now.Add(6*time.Millisecond)) {
		t.Fatal("held back with no work waiting")
	}
}

// TestGatheringWaitsLongerOnASlowServer: the window grows to the server's
// round trip, within maxGatherWindow: a claim of a few costs a round trip
// as one of many does.
func TestGatheringWaitsLongerOnASlowServer(t *testing.T) {
	c := &Engine{cfg: &Config{Capacity: 16, ClaimBatchMax: 64, ClaimBatchWindow: 5 * time.Millisecond},
		limiter: pressure.New(16, time.Now, nil)}
	c.limiter.Observe(400 * time.Millisecond)
	st := &claimState{backlog: true}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.held.Store(10) // 6 free, fewer than the 16 a batch fills
	if !c.gathering(st, now) {
		t.Fatal("6 of 16 slots free with work waiting: not held back")
	}
	if !c.gathering(st, now.Add(399*time.Millisecond)) {
		t.Fatal("held back for less than the 400 ms round trip")
	}
	if c.gathering(st, now.Add(400*time.Millisecond)) {
		t.Fatal("held back past the round trip")
	}
	for range 20 {
		c.limiter.Observe(5 * time.Second)
	}
	if w := c.gatherWindow(); w != maxGatherWindow {
		t.Fatalf("window at a 5 s round trip: %s, want %s", w, maxGatherWindow)
	}
}
