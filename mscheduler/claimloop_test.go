package mscheduler

import (
	"testing"
	"time"
)

// TestGatheringWaitsForEndingRuns: with work waiting, a claim is held back
// while runs of the consumer are writing their ends, even with half its
// slots free (the runs of one batched end free their slots together), but
// not past the window, and not without work waiting.
func TestGatheringWaitsForEndingRuns(t *testing.T) {
	c := &Consumer[int, int]{cfg: &ConsumerConfig{Capacity: 16, ClaimBatchMax: 64, ClaimBatchWindow: 5 * time.Millisecond}}
	st := &claimState{backlog: true}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.held.Store(4)
	if c.gathering(st, now) {
		t.Fatal("12 of 16 slots free and no run ending: held back")
	}
	c.ending.Store(2)
	if !c.gathering(st, now) {
		t.Fatal("2 runs writing their ends: not held back")
	}
	if !c.gathering(st, now.Add(4*time.Millisecond)) {
		t.Fatal("held back for less than the window")
	}
	if c.gathering(st, now.Add(5*time.Millisecond)) {
		t.Fatal("held back past the window")
	}
	st.backlog = false
	if c.gathering(st, now.Add(6*time.Millisecond)) {
		t.Fatal("held back with no work waiting")
	}
}
