package mscheduler

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func candidatesOf(priorities ...int64) []candidate {
	out := make([]candidate, len(priorities))
	for i, p := range priorities {
		out[i] = candidate{Key: fmt.Sprintf("k%03d", i), Priority: p}
	}
	return out
}

func samePriority(n int) []candidate { return candidatesOf(make([]int64, n)...) }

// TestChooseSpreadsPeersApart: consumers that read the same candidates
// choose runs that do not overlap, by their rank among the peers, as long
// as the candidates hold a run for each.
func TestChooseSpreadsPeersApart(t *testing.T) {
	for _, c := range []struct{ peers, k int }{{2, 16}, {4, 16}, {8, 16}, {4, 5}} {
		t.Run(fmt.Sprintf("peers=%d,k=%d", c.peers, c.k), func(t *testing.T) {
			cands := samePriority(c.k * max(claimSpread, min(c.peers, maxClaimSpread)))
			taken := map[string]int{}
			for rank := range c.peers {
				chosen := choose(cands, c.k, c.peers, rank)
				if len(chosen) != c.k {
					t.Fatalf("rank %d chose %d, want %d", rank, len(chosen), c.k)
				}
				for _, cd := range chosen {
					if r, ok := taken[cd.Key]; ok {
						t.Errorf("%s chosen by ranks %d and %d", cd.Key, r, rank)
					}
					taken[cd.Key] = rank
				}
			}
		})
	}
}

// TestChooseKeepsToTheHighestPriority: a run never reaches past the
// candidates of the highest priority when they are enough for it, and a
// consumer that knows no peers (or holds a stale rank) starts anywhere
// among them.
func TestChooseKeepsToTheHighestPriority(t *testing.T) {
	priorities := make([]int64, 64)
	for i := range 24 {
		priorities[i] = 5
	}
	cands := candidatesOf(priorities...)
	for _, c := range []struct{ peers, rank int }{{1, 0}, {4, 0}, {4, 3}, {2, 7}} {
		for range 50 {
			for _, cd := range choose(cands, 16, c.peers, c.rank) {
				if cd.Priority != 5 {
					t.Fatalf("peers %d rank %d chose %s of priority %d", c.peers, c.rank, cd.Key, cd.Priority)
				}
			}
		}
	}
	if got := choose(candidatesOf(1, 1, 0, 0), 16, 4, 2); len(got) != 4 {
		t.Errorf("with fewer candidates than slots, chose %d of 4", len(got))
	}
}

// TestCountPeersRanks: a consumer's rank is how many consumers alive have
// a worker id before its own; lapsed ones and values not dates do not
// count, and are returned as gone.
func TestCountPeersRanks(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	raw, err := bson.Marshal(bson.D{{Key: "seen", Value: bson.D{
		{Key: "c", Value: now}, {Key: "a", Value: now.Add(-time.Second)}, {Key: "e", Value: now},
		{Key: "b", Value: now.Add(-time.Hour)}, {Key: "d", Value: "yesterday"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	alive := window{now.Add(-time.Minute), now.Add(time.Minute)}
	for self, want := range map[string]int{"a": 0, "c": 1, "e": 2, "zz": 3} {
		view := countPeers(raw, alive, self)
		if view.alive != 3 || view.rank != want || fmt.Sprint(view.gone) != "[b d]" {
			t.Errorf("as %s: alive %d, rank %d, gone %v; want 3, %d, [b d]", self, view.alive, view.rank, view.gone, want)
		}
	}
}

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
