// Package claimchoice chooses which of the candidates a batch claim read
// a consumer claims, so that consumers reading at once choose apart, and
// keeps the spares for its next claims.
package claimchoice

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Candidate is a task that a batch may claim. It is read field by field,
// leniently: a hand-edited field of the wrong type must not stop the
// batch (the claim's inspection sets such a task invalid, naming it).
type Candidate struct {
	Key             string
	ID              bson.RawValue // the _id as read: the claim's statement is fenced on it
	Priority        int64
	WorkerTimeoutMS int64
	Raw             bson.Raw // the task as read, without its runs
	// Exact says it can be claimed without a read back (see
	// taskstate.ExactCandidate).
	Exact bool
	// Contended says two consumers claiming it at once would spend a
	// statement each on one run (see contended).
	Contended bool
}

// Of reads a candidate; a task whose _id is not a string is not
// one (the single claim and the periodic check deal with it).
func Of(raw bson.Raw) (Candidate, bool) {
	key, ok := raw.Lookup(stored.FID).StringValueOK()
	if !ok {
		return Candidate{}, false
	}
	priority, _ := raw.Lookup(stored.FPriority).AsInt64OK()
	timeout, _ := raw.Lookup(stored.FWorkerTimeoutMS).AsInt64OK()
	return Candidate{Key: key, ID: raw.Lookup(stored.FID), Priority: priority, WorkerTimeoutMS: timeout, Raw: raw,
		Exact: taskstate.ExactCandidate(raw), Contended: contended(raw)}, true
}

// contended says two consumers claiming the candidate at once
// would spend a statement each on one run: a task of concurrency 1 that
// any consumer may run. A task of higher concurrency has a run for each
// (see choose), and one with an allow-list is for the workers it names,
// whatever their shares.
func contended(raw bson.Raw) bool {
	if conc, ok := raw.Lookup(stored.FConcurrency).AsInt64OK(); !ok || conc != 1 {
		return false
	}
	ids, ok := raw.Lookup(stored.FWorkerIDs).ArrayOK()
	if !ok {
		return true
	}
	vals, err := ids.Values()
	return err == nil && len(vals) == 0
}

// A batch claim reads more candidates than it has free slots, so that
// consumers reading at once can choose different tasks. Each consumer
// prefers the candidates of its share: the tasks whose key hashes to its
// rank among the consumers alive. Unlike places in the list, a share holds
// whenever a consumer reads, as tasks are claimed and the list moves on,
// so consumers reading a moment apart still choose apart.
//
// A consumer takes a task of another share only once it was passed over:
// seen by an earlier read of this consumer at least a moment before (see
// PassOver). Its own consumer, with free slots, claims it within that
// moment; one with no free slot, or gone, leaves it, and the others take
// it then. Taken at once, it was claimed twice over whenever the work ran
// short of the slots (at the end of a backlog, or while consumers join
// and their shares move), and the statement that lost it, each a scan of
// the collection on a server without indexes, cost more than the claim.
//
// The candidates of its share that a claim did not choose are its spares:
// while work is waiting, the next claims take them, within ClaimSpareFor,
// without reading candidates again. Every claim statement is fenced, so a
// spare that another consumer took meanwhile only misses.

// shareOf is the share among peers that a task key falls in.
func ShareOf(key string, peers int) int { return shareOfHash(fnvOf(key), peers) }

func shareOfHash(h uint32, peers int) int { return int(h % uint32(peers)) }

// fnvOf is the FNV-1a hash of a task key.
func fnvOf(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

// choose picks k of the candidates (fewer if there are fewer), in claim
// order by priority: first those of the highest priority, then the next,
// and so on. Within a priority a consumer of rank rank among peers takes
// the candidates of its share in claim order, then, if they are too few,
// the others that passed says it may take (nil: all), from the last (the
// least likely to be taken by their own consumer soon); one alone takes
// them all in claim order. held says it left some of another share that
// it would have taken: it then takes none of a lower priority, so that
// priority order holds when it takes them later. A consumer that does not
// know yet how many are alive, or holds a stale rank, takes a run of k at
// a random place among the highest priority.
//
// It also returns the spares: the candidates of its share and of the
// highest priority that it did not choose, in claim order. Spares of a
// lower priority are not kept: they would go before the highest-priority
// tasks of other shares.
func Choose(cands []Candidate, k, peers, rank int, passed func(Candidate) bool) (chosen, spares []Candidate, held bool) {
	if len(cands) == 0 || k <= 0 {
		return nil, nil, false
	}
	top := topPriority(cands)
	if peers < 1 || rank < 0 || rank >= peers {
		chosen, spares = chooseAnywhere(cands, top, k)
		return chosen, spares, false
	}
	own, taken := make([]bool, len(cands)), make([]bool, len(cands))
	for i, cd := range cands {
		own[i] = ShareOf(cd.Key, peers) == rank
	}
	for lo := 0; lo < len(cands) && len(chosen) < k && !held; {
		hi := lo + topPriority(cands[lo:])
		for i := lo; i < hi && len(chosen) < k; i++ {
			if own[i] {
				chosen, taken[i] = append(chosen, cands[i]), true
			}
		}
		for i := hi - 1; i >= lo && len(chosen) < k; i-- {
			switch {
			case taken[i]:
			case passed == nil || passed(cands[i]):
				chosen, taken[i] = append(chosen, cands[i]), true
			default:
				held = true
			}
		}
		lo = hi
	}
	for i := range top {
		if !taken[i] && own[i] {
			spares = append(spares, cands[i])
		}
	}
	return chosen, spares, held
}

// chooseAnywhere takes a run of k at a random place among the top
// candidates of the highest priority (all of them and the next ones if
// they are not more than k); the other top ones are the spares.
func chooseAnywhere(cands []Candidate, top, k int) (chosen, spares []Candidate) {
	if len(cands) <= k {
		return cands, nil
	}
	start := 0
	if last := top - k; last > 0 {
		start = rand.IntN(last + 1)
	}
	chosen = slices.Clip(cands[start : start+k])
	if start+k <= top {
		spares = append(append(spares, cands[:start]...), cands[start+k:top]...)
	}
	return chosen, spares
}

// topPriority counts the candidates, from the first, of the first one's
// priority.
func topPriority(cands []Candidate) int {
	n := 1
	for n < len(cands) && cands[n].Priority == cands[0].Priority {
		n++
	}
	return n
}

// Spares are the spares of the last batch claim, kept for the
// next claims while they are fresh. They belong to the claim loop.
type Spares struct {
	cands []Candidate
	read  time.Time // when they were read, on the monotonic clock
	// mixed says the last read chose tasks not all of concurrency 1:
	// claims of them need a read back, so a claim of fewer slots than a
	// batch is cheaper as a findAndModify, until the work runs out.
	Mixed bool
	// missed says a claim from spares missed a task since the claim pass
	// began: the pass comes back at once, to read candidates afresh.
	Missed bool
}

// keep replaces the spares with those of a read at read, in which chosen
// were claimed.
func (s *Spares) Keep(spares, chosen []Candidate, read time.Time) {
	s.cands, s.read = spares, read
	s.Mixed = slices.ContainsFunc(chosen, func(cd Candidate) bool { return !cd.Exact })
}

// holds says whether at least k spares are fresh at now: read less than
// spareFor before it.
func (s *Spares) Holds(k int, now time.Time, spareFor time.Duration) bool {
	return k > 0 && len(s.cands) >= k && now.Sub(s.read) < spareFor
}

// take removes and returns the first k spares if they hold k fresh ones;
// otherwise it forgets them all and returns nil.
func (s *Spares) Take(k int, now time.Time, spareFor time.Duration) []Candidate {
	if !s.Holds(k, now, spareFor) {
		s.Drop()
		return nil
	}
	out := s.cands[:k:k]
	s.cands = s.cands[k:]
	return out
}

// drop forgets the spares.
func (s *Spares) Drop() { s.cands = nil }

// serves says a claim of k slots, fewer than a batch fills, should go by
// the spares or by a read that keeps some: they hold k fresh ones, or the
// last read found tasks of concurrency 1 only.
func (s *Spares) Serves(k int, now time.Time, spareFor time.Duration) bool {
	return spareFor > 0 && (s.Holds(k, now, spareFor) || !s.Mixed)
}

// PassOver remembers when this consumer first saw each contended
// candidate of another share, so that it takes one only once passed over.
// It belongs to the claim loop.
type PassOver struct {
	seen map[string]sighting // by key: the candidates of the last read it waits for
}

// sighting is when a candidate was first seen, on the monotonic clock,
// whether this consumer is its helper, and the wait it was given then.
// The wait stays as given: measured again at each read (it follows the
// claims' round trips), it grew on a busy server between the read that
// held the candidate and the read at the time it was held for, which
// then held it again, and read once more for nothing.
type sighting struct {
	first  time.Time
	helper bool
	wait   time.Duration
}

// See records the contended candidates of other shares in a read at now,
// each new one with wait, keeping when and with what wait those seen
// before were first seen, and forgets the rest: a task that left the
// candidates and came back is new again.
func (p *PassOver) See(cands []Candidate, peers, rank int, now time.Time, wait time.Duration) {
	seen := make(map[string]sighting, len(p.seen))
	for _, cd := range cands {
		if !cd.Contended || peers <= 1 {
			continue
		}
		h := fnvOf(cd.Key)
		if shareOfHash(h, peers) == rank {
			continue
		}
		s, ok := p.seen[cd.Key]
		if !ok {
			s = sighting{first: now, helper: helperOfHash(h, peers) == rank, wait: wait}
		}
		seen[cd.Key] = s
	}
	p.seen = seen
}

// Passed says this consumer may take cd, a candidate of the last read, at
// now: it does not wait for it, or cd was first seen at least its wait
// before (twice that unless this consumer is its helper).
func (p *PassOver) Passed(cd Candidate, now time.Time) bool {
	s, ok := p.seen[cd.Key]
	return !ok || !now.Before(s.passes())
}

// passes is when the candidate passes.
func (s sighting) passes() time.Time {
	if s.helper {
		return s.first.Add(s.wait)
	}
	return s.first.Add(2 * s.wait)
}

// UntilNext is how long after now the first of the candidates seen that
// have not passed yet passes, or 0 if none waits.
func (p *PassOver) UntilNext(now time.Time) time.Duration {
	var next time.Duration
	for _, s := range p.seen {
		if d := s.passes().Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}

// helperOf is the consumer that takes a task of another share first, once
// passed over: another for each task of a share, so that the others
// helping with a share do not all take the same tasks (from the last)
// and lose them to one another, and a share left by a consumer gone is
// spread over all of them.
func HelperOf(key string, peers int) int { return helperOfHash(fnvOf(key), peers) }

func helperOfHash(h uint32, peers int) int {
	owner := shareOfHash(h, peers)
	return (owner + 1 + int(h/uint32(peers)%uint32(peers-1))) % peers
}
