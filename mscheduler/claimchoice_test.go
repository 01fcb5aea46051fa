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
				chosen, spare, _ := choose(cands, c.k, c.peers, rank, nil)
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
	first, spares, _ := choose(cands, k, peers, 0, nil)
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
		chosen, _, _ := choose(later, k, peers, rank, nil)
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
	chosen, spares, _ := choose(cands, 4, 4, 1, nil)
	got := ""
	for _, cd := range chosen {
		got += cd.Key + " "
	}
	want := cands[1].Key + " " + cands[5].Key + " " + cands[7].Key + " " + cands[6].Key + " "
	if got != want || len(spares) != 0 {
		t.Errorf("chose %s with %d spares, want %s and none", got, len(spares), want)
	}
}

// TestChooseLeavesOtherSharesUntilPassedOver: a consumer whose share is
// short takes contended candidates of other shares only where passed says
// so; one it leaves makes it say held and take nothing of a lower
// priority. Candidates that are not contended are taken at once.
func TestChooseLeavesOtherSharesUntilPassedOver(t *testing.T) {
	cands := balanced(8, 4) // two of each share
	for i := range cands {
		cands[i].contended = true
	}
	lower := balanced(16, 4)[8:]
	for i := range lower {
		lower[i].Priority, lower[i].contended = -1, true
	}
	all := slices.Concat(cands, lower)
	mine := func(cd candidate) bool { return shareOf(cd.Key, 4) == 1 }
	never := func(candidate) bool { return false }

	chosen, _, held := choose(all, 4, 4, 1, never)
	if !held || len(chosen) != 2 || !mine(chosen[0]) || !mine(chosen[1]) || chosen[0].Priority != 0 || chosen[1].Priority != 0 {
		t.Errorf("nothing passed over: chose %v, held %v; want the 2 of its share of the highest priority, held", chosen, held)
	}
	passed := func(cd candidate) bool { return cd.Key == cands[6].Key }
	chosen, _, held = choose(all, 4, 4, 1, passed)
	if !held || len(chosen) != 3 || chosen[2].Key != cands[6].Key {
		t.Errorf("one passed over: chose %v, held %v; want its 2 and %s, held", chosen, held, cands[6].Key)
	}
	chosen, _, held = choose(all, 4, 4, 1, func(candidate) bool { return true })
	if held || len(chosen) != 4 {
		t.Errorf("all passed over: chose %d, held %v; want 4, not held", len(chosen), held)
	}
	for i := range all {
		all[i].contended = false
	}
	chosen, _, held = choose(all, 4, 4, 1, func(cd candidate) bool { return !cd.contended })
	if held || len(chosen) != 4 {
		t.Errorf("none contended: chose %d, held %v; want 4, not held", len(chosen), held)
	}
}

// TestPassOverCountsFromTheFirstRead: a contended candidate of another
// share passes for its helper once first seen at least the wait before,
// and for any other consumer twice the wait before; one that left a read
// and came back counts afresh; the consumer's own share, tasks not
// contended, and a consumer alone are never kept waiting.
func TestPassOverCountsFromTheFirstRead(t *testing.T) {
	const peers, rank, wait = 4, 1, time.Second
	var own, helped, other, free candidate
	for i := 0; own.Key == "" || helped.Key == "" || other.Key == "" || free.Key == ""; i++ {
		cd := candidate{Key: fmt.Sprintf("t%04d", i), contended: true}
		switch {
		case shareOf(cd.Key, peers) == rank:
			own = cd
		case helperOf(cd.Key, peers) == rank:
			helped = cd
		case other.Key == "":
			other = cd
		default:
			free = cd
			free.contended = false
		}
	}
	cands := []candidate{own, helped, other, free}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var p passOver
	p.see(cands, peers, rank, t0)
	if p.passed(helped, t0, wait) || p.passed(other, t0, wait) || !p.passed(own, t0, wait) || !p.passed(free, t0, wait) {
		t.Fatal("at the first read: another share's contended task passed, or the own share or a task not contended did not")
	}
	half, one, two := t0.Add(wait/2), t0.Add(wait), t0.Add(2*wait)
	p.see(cands, peers, rank, half)
	if p.passed(helped, half, wait) || !p.passed(helped, one, wait) {
		t.Fatal("the helper's wait is not counted from the first read")
	}
	if p.passed(other, one, wait) || !p.passed(other, two, wait) {
		t.Fatal("another consumer's wait is not twice the helper's")
	}
	if d := p.untilNext(half, wait); d != wait/2 {
		t.Errorf("half a wait in: the next passes in %v, want %v (the helped one's)", d, wait/2)
	}
	if d := p.untilNext(one, wait); d != wait {
		t.Errorf("a wait in: the next passes in %v, want %v (the other's)", d, wait)
	}
	p.see(cands[:1], peers, rank, one)
	p.see(cands, peers, rank, two)
	if p.passed(helped, two, wait) {
		t.Fatal("a task that left the candidates and came back kept its first sight")
	}
	var alone passOver
	alone.see(cands, 1, 0, t0)
	if !alone.passed(other, t0, wait) {
		t.Fatal("a consumer alone is kept waiting")
	}
}

// TestHelpersSpreadOverTheOthers: the helpers of a share's tasks are the
// other consumers, each about as often, never the share's own.
func TestHelpersSpreadOverTheOthers(t *testing.T) {
	const peers, n = 8, 8000
	count := make([]int, peers)
	for i := range n {
		key := fmt.Sprintf("task-%06d", i)
		h := helperOf(key, peers)
		if h == shareOf(key, peers) || h < 0 || h >= peers {
			t.Fatalf("%s of share %d has helper %d", key, shareOf(key, peers), h)
		}
		count[h]++
	}
	for r, c := range count {
		if c < n/peers*8/10 || c > n/peers*12/10 {
			t.Errorf("consumer %d helps with %d of %d tasks, want about %d", r, c, n, n/peers)
		}
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
			chosen, spares, _ := choose(cands, 4, c.peers, c.rank, nil)
			for _, cd := range slices.Concat(chosen, spares) {
				if cd.Priority != 5 {
					t.Fatalf("peers %d rank %d chose or kept %s of priority %d", c.peers, c.rank, cd.Key, cd.Priority)
				}
			}
		}
	}
	if got, _, _ := choose(candidatesOf(1, 1, 0, 0), 16, 4, 2, nil); len(got) != 4 {
		t.Errorf("with fewer candidates than slots, chose %d of 4", len(got))
	}
	got, _, _ := choose(candidatesOf(1, 1, 0, 0, 0, 0), 3, 2, 0, nil)
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
