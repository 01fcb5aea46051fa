package claimchoice

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func candidatesOf(priorities ...int64) []Candidate {
	out := make([]Candidate, len(priorities))
	for i, p := range priorities {
		out[i] = Candidate{Key: fmt.Sprintf("k%03d", i), Priority: p}
	}
	return out
}

func samePriority(n int) []Candidate { return candidatesOf(make([]int64, n)...) }

// balanced returns n candidates of one priority whose keys fall in the
// shares of peers in turn, so that each share holds n/peers of them.
func balanced(n, peers int) []Candidate {
	out := make([]Candidate, 0, n)
	for i, j := 0, 0; len(out) < n; j++ {
		key := fmt.Sprintf("t%05d", j)
		if ShareOf(key, peers) == i%peers {
			out = append(out, Candidate{Key: key})
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
			cands := balanced(2*c.k*max(4, min(c.peers, 8)), c.peers) // as a batch claim reads them
			taken := map[string]int{}
			var spares []Candidate
			for rank := range c.peers {
				chosen, spare, _ := Choose(cands, c.k, c.peers, rank, nil)
				if len(chosen) != c.k {
					t.Fatalf("rank %d chose %d, want %d", rank, len(chosen), c.k)
				}
				for _, cd := range slices.Concat(chosen, spare) {
					if s := ShareOf(cd.Key, c.peers); s != rank {
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
	first, spares, _ := Choose(cands, k, peers, 0, nil)
	gone := map[string]bool{}
	for _, cd := range first {
		gone[cd.Key] = true
	}
	var later []Candidate // read after rank 0's claim: its choice is running
	for _, cd := range cands {
		if !gone[cd.Key] {
			later = append(later, cd)
		}
	}
	for _, cd := range spares {
		gone[cd.Key] = true
	}
	for rank := 1; rank < peers; rank++ {
		chosen, _, _ := Choose(later, k, peers, rank, nil)
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
	chosen, spares, _ := Choose(cands, 4, 4, 1, nil)
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
		cands[i].Contended = true
	}
	lower := balanced(16, 4)[8:]
	for i := range lower {
		lower[i].Priority, lower[i].Contended = -1, true
	}
	all := slices.Concat(cands, lower)
	mine := func(cd Candidate) bool { return ShareOf(cd.Key, 4) == 1 }
	never := func(Candidate) bool { return false }

	chosen, _, held := Choose(all, 4, 4, 1, never)
	if !held || len(chosen) != 2 || !mine(chosen[0]) || !mine(chosen[1]) || chosen[0].Priority != 0 || chosen[1].Priority != 0 {
		t.Errorf("nothing passed over: chose %v, held %v; want the 2 of its share of the highest priority, held", chosen, held)
	}
	passed := func(cd Candidate) bool { return cd.Key == cands[6].Key }
	chosen, _, held = Choose(all, 4, 4, 1, passed)
	if !held || len(chosen) != 3 || chosen[2].Key != cands[6].Key {
		t.Errorf("one passed over: chose %v, held %v; want its 2 and %s, held", chosen, held, cands[6].Key)
	}
	chosen, _, held = Choose(all, 4, 4, 1, func(Candidate) bool { return true })
	if held || len(chosen) != 4 {
		t.Errorf("all passed over: chose %d, held %v; want 4, not held", len(chosen), held)
	}
	for i := range all {
		all[i].Contended = false
	}
	chosen, _, held = Choose(all, 4, 4, 1, func(cd Candidate) bool { return !cd.Contended })
	if held || len(chosen) != 4 {
		t.Errorf("none contended: chose %d, held %v; want 4, not held", len(chosen), held)
	}
}

// TestPassOverCountsFromTheFirstRead: a contended Candidate of another
// share passes for its helper once first seen at least the wait before,
// and for any other consumer twice the wait before; one that left a read
// and came back counts afresh; the consumer's own share, tasks not
// contended, and a consumer alone are never kept waiting.
func TestPassOverCountsFromTheFirstRead(t *testing.T) {
	const peers, rank, wait = 4, 1, time.Second
	var own, helped, other, free Candidate
	for i := 0; own.Key == "" || helped.Key == "" || other.Key == "" || free.Key == ""; i++ {
		cd := Candidate{Key: fmt.Sprintf("t%04d", i), Contended: true}
		switch {
		case ShareOf(cd.Key, peers) == rank:
			own = cd
		case HelperOf(cd.Key, peers) == rank:
			helped = cd
		case other.Key == "":
			other = cd
		default:
			free = cd
			free.Contended = false
		}
	}
	cands := []Candidate{own, helped, other, free}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var p PassOver
	p.See(cands, peers, rank, t0, wait)
	if p.Passed(helped, t0) || p.Passed(other, t0) || !p.Passed(own, t0) || !p.Passed(free, t0) {
		t.Fatal("at the first read: another share's contended task passed, or the own share or a task not contended did not")
	}
	half, one, two := t0.Add(wait/2), t0.Add(wait), t0.Add(2*wait)
	p.See(cands, peers, rank, half, wait)
	if p.Passed(helped, half) || !p.Passed(helped, one) {
		t.Fatal("the helper's wait is not counted from the first read")
	}
	if p.Passed(other, one) || !p.Passed(other, two) {
		t.Fatal("another consumer's wait is not twice the helper's")
	}
	if d := p.UntilNext(half); d != wait/2 {
		t.Errorf("half a wait in: the next passes in %v, want %v (the helped one's)", d, wait/2)
	}
	if d := p.UntilNext(one); d != wait {
		t.Errorf("a wait in: the next passes in %v, want %v (the other's)", d, wait)
	}
	p.See(cands[:1], peers, rank, one, wait)
	p.See(cands, peers, rank, two, wait)
	if p.Passed(helped, two) {
		t.Fatal("a task that left the candidates and came back kept its first sight")
	}
	var alone PassOver
	alone.See(cands, 1, 0, t0, wait)
	if !alone.Passed(other, t0) {
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
		h := HelperOf(key, peers)
		if h == ShareOf(key, peers) || h < 0 || h >= peers {
			t.Fatalf("%s of share %d has helper %d", key, ShareOf(key, peers), h)
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
			chosen, spares, _ := Choose(cands, 4, c.peers, c.rank, nil)
			for _, cd := range slices.Concat(chosen, spares) {
				if cd.Priority != 5 {
					t.Fatalf("peers %d rank %d chose or kept %s of priority %d", c.peers, c.rank, cd.Key, cd.Priority)
				}
			}
		}
	}
	if got, _, _ := Choose(candidatesOf(1, 1, 0, 0), 16, 4, 2, nil); len(got) != 4 {
		t.Errorf("with fewer candidates than slots, chose %d of 4", len(got))
	}
	got, _, _ := Choose(candidatesOf(1, 1, 0, 0, 0, 0), 3, 2, 0, nil)
	if len(got) != 3 || got[0].Priority != 1 || got[1].Priority != 1 {
		t.Errorf("chose %v, want both of priority 1 first", got)
	}
}

// TestSpareCandidatesServeWhileFresh: spares serve a claim only while
// they hold as many as it wants and are younger than spareFor; a claim
// they cannot serve forgets them.
func TestSpareCandidatesServeWhileFresh(t *testing.T) {
	read := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s Spares
	s.Keep(samePriority(5), nil, read)
	if got := s.Take(2, read.Add(100*time.Millisecond), time.Second); len(got) != 2 || got[0].Key != "k000" {
		t.Fatalf("took %v, want k000 and k001", got)
	}
	if s.Holds(4, read, time.Second) || !s.Holds(3, read, time.Second) {
		t.Fatal("3 spares left: holds 4, or not 3")
	}
	if got := s.Take(3, read.Add(time.Second), time.Second); got != nil {
		t.Fatalf("took %v at spareFor, want none", got)
	}
	s.Keep(samePriority(5), nil, read)
	if got := s.Take(6, read, time.Second); got != nil || s.Holds(1, read, time.Second) {
		t.Fatalf("took %v of 5, or kept them", got)
	}
	s.Keep(samePriority(5), nil, read)
	if s.Holds(1, read, 0) {
		t.Fatal("spares hold with spareFor 0")
	}
}
