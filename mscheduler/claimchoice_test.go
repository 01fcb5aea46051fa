package mscheduler

import (
	"fmt"
	"slices"
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

// balanced returns n candidates of one priority whose keys fall in the
// shares of peers in turn, so that each share holds n/peers of them.
func balanced(n, peers int) []candidate {
	out := make([]candidate, 0, n)
	for i, j := 0, 0; len(out) < n; j++ {
		key := fmt.Sprintf("t%05d", j)
		if shareOf(key, peers) == i%peers {
			out = append(out, candidate{Key: key})
			i++
		}
	}
	return out
}

// TestChooseSpreadsPeersApart: consumers that read the same candidates
// choose runs that do not overlap, each from its share, as long as each
// share holds a run; each keeps the rest of its share as spares, which
// no other consumer chose.
func TestChooseSpreadsPeersApart(t *testing.T) {
	for _, c := range []struct{ peers, k int }{{2, 16}, {4, 16}, {8, 16}, {4, 5}} {
		t.Run(fmt.Sprintf("peers=%d,k=%d", c.peers, c.k), func(t *testing.T) {
			cands := balanced(2*c.k*max(claimSpread, min(c.peers, maxClaimSpread)), c.peers)
			taken := map[string]int{}
			var spares []candidate
			for rank := range c.peers {
				chosen, spare := choose(cands, c.k, c.peers, rank)
				if len(chosen) != c.k {
					t.Fatalf("rank %d chose %d, want %d", rank, len(chosen), c.k)
				}
				for _, cd := range slices.Concat(chosen, spare) {
					if s := shareOf(cd.Key, c.peers); s != rank {
						t.Errorf("rank %d chose or kept %s, of share %d", rank, cd.Key, s)
					}
				}
				for _, cd := range chosen {
					if r, ok := taken[cd.Key]; ok {
						t.Errorf("%s chosen by ranks %d and %d", cd.Key, r, rank)
					}
					taken[cd.Key] = rank
				}
				spares = append(spares, spare...)
			}
			for _, cd := range spares {
				if r, ok := taken[cd.Key]; ok {
					t.Errorf("spare %s was chosen by rank %d", cd.Key, r)
				}
			}
		})
	}
}

// TestChooseApartWhenReadingApart: a consumer that reads after another
// claimed its choice (the list moved on) still chooses apart from it, and
// from its spares.
func TestChooseApartWhenReadingApart(t *testing.T) {
	const peers, k = 4, 8
	cands := balanced(peers*k*4, peers)
	first, spares := choose(cands, k, peers, 0)
	gone := map[string]bool{}
	for _, cd := range first {
		gone[cd.Key] = true
	}
	var later []candidate // read after rank 0's claim: its choice is running
	for _, cd := range cands {
		if !gone[cd.Key] {
			later = append(later, cd)
		}
	}
	for _, cd := range spares {
		gone[cd.Key] = true
	}
	for rank := 1; rank < peers; rank++ {
		chosen, _ := choose(later, k, peers, rank)
		for _, cd := range chosen {
			if gone[cd.Key] {
				t.Errorf("rank %d chose %s, chosen or kept by rank 0", rank, cd.Key)
			}
		}
	}
}

// TestChooseFillsFromOtherSharesLast: a consumer whose share is short
// takes the candidates of other shares from the last, in claim order of
// priority, and keeps no spares.
func TestChooseFillsFromOtherSharesLast(t *testing.T) {
	cands := balanced(8, 4) // two of each share
	chosen, spares := choose(cands, 4, 4, 1)
	got := ""
	for _, cd := range chosen {
		got += cd.Key + " "
	}
	want := cands[1].Key + " " + cands[5].Key + " " + cands[7].Key + " " + cands[6].Key + " "
	if got != want || len(spares) != 0 {
		t.Errorf("chose %s with %d spares, want %s and none", got, len(spares), want)
	}
}

// TestChooseKeepsToTheHighestPriority: a run never reaches past the
// candidates of the highest priority when they are enough for it, a
// consumer that knows no peers (or holds a stale rank) starts anywhere
// among them, and spares are of the highest priority only.
func TestChooseKeepsToTheHighestPriority(t *testing.T) {
	priorities := make([]int64, 64)
	for i := range 24 {
		priorities[i] = 5
	}
	cands := candidatesOf(priorities...)
	for _, c := range []struct{ peers, rank int }{{0, 0}, {1, 0}, {4, 0}, {4, 3}, {2, 7}, {2, 1}} {
		for range 50 {
			chosen, spares := choose(cands, 4, c.peers, c.rank)
			for _, cd := range slices.Concat(chosen, spares) {
				if cd.Priority != 5 {
					t.Fatalf("peers %d rank %d chose or kept %s of priority %d", c.peers, c.rank, cd.Key, cd.Priority)
				}
			}
		}
	}
	if got, _ := choose(candidatesOf(1, 1, 0, 0), 16, 4, 2); len(got) != 4 {
		t.Errorf("with fewer candidates than slots, chose %d of 4", len(got))
	}
	got, _ := choose(candidatesOf(1, 1, 0, 0, 0, 0), 3, 2, 0)
	if len(got) != 3 || got[0].Priority != 1 || got[1].Priority != 1 {
		t.Errorf("chose %v, want both of priority 1 first", got)
	}
}

// TestSpareCandidatesServeWhileFresh: spares serve a claim only while
// they hold as many as it wants and are younger than spareFor; a claim
// they cannot serve forgets them.
func TestSpareCandidatesServeWhileFresh(t *testing.T) {
	read := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s spareCandidates
	s.keep(samePriority(5), nil, read)
	if got := s.take(2, read.Add(100*time.Millisecond), time.Second); len(got) != 2 || got[0].Key != "k000" {
		t.Fatalf("took %v, want k000 and k001", got)
	}
	if s.holds(4, read, time.Second) || !s.holds(3, read, time.Second) {
		t.Fatal("3 spares left: holds 4, or not 3")
	}
	if got := s.take(3, read.Add(time.Second), time.Second); got != nil {
		t.Fatalf("took %v at spareFor, want none", got)
	}
	s.keep(samePriority(5), nil, read)
	if got := s.take(6, read, time.Second); got != nil || s.holds(1, read, time.Second) {
		t.Fatalf("took %v of 5, or kept them", got)
	}
	s.keep(samePriority(5), nil, read)
	if s.holds(1, read, 0) {
		t.Fatal("spares hold with spareFor 0")
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
