package engine

import (
	"context"
	"sync"
	"time"
)

// A worker whose run a sweep of this consumer recorded expired stopped
// renewing its lease: it is presumed gone, and the upkeep loop forgets it
// in the registry at once (unless it announced since the lease lapsed)
// and announces for a view without it. Otherwise a killed worker counted
// as alive for peerLapse maintenance intervals, and each one spread the
// others' sweeps further apart: in the crash trial, with a worker killed
// every 2-4 s and 10 s intervals, a dozen dead ones were counted at once,
// the collection was swept every couple of seconds instead of every
// SweepInterval, and a killed worker's run waited up to 3 s past its lease
// for a sweep. A live worker forgotten this way (its lease lapsed on a
// slow server) is back at its next announce; meanwhile the others only
// sweep and poll a little more often.

// goneSuspects are the workers this consumer's sweeps found gone, with
// when the lease of their run lapsed: written by the sweep loop through
// the upkeep's Expired report, taken by the upkeep loop at its announce.
type goneSuspects struct {
	mu        sync.Mutex           // guards what follows
	lapsed    map[string]time.Time // by worker id: the latest lapse seen
	forgotten map[string]time.Time // by worker id: the lapse it was forgotten for
}

// maxForgotten bounds goneSuspects.forgotten: past it, it starts afresh.
const maxForgotten = 1024

// suspectGone takes in a run of workerID that lapsed at lapsed, and asks
// the upkeep loop to announce soon. A lapse no later than the one the
// worker was forgotten for is old news.
func (c *Engine) suspectGone(workerID string, lapsed time.Time) {
	if workerID == c.cfg.WorkerID {
		return
	}
	s := &c.suspects
	s.mu.Lock()
	if at, ok := s.forgotten[workerID]; ok && !lapsed.After(at) {
		s.mu.Unlock()
		return
	}
	if s.lapsed == nil {
		s.lapsed = map[string]time.Time{}
	}
	if at, ok := s.lapsed[workerID]; !ok || lapsed.After(at) {
		s.lapsed[workerID] = lapsed
	}
	s.mu.Unlock()
	c.askReannounce()
}

// takeSuspects returns the workers presumed gone since the last call, and
// notes them as forgotten.
func (s *goneSuspects) take() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.lapsed
	s.lapsed = nil
	if len(s.forgotten)+len(out) > maxForgotten {
		s.forgotten = nil
	}
	if s.forgotten == nil {
		s.forgotten = map[string]time.Time{}
	}
	for id, at := range out {
		s.forgotten[id] = at
	}
	return out
}

// forgetSuspects removes from the registry the workers presumed gone that
// have not announced since their run lapsed; before an announce, whose
// view then counts them out.
func (c *Engine) forgetSuspects(ctx context.Context) {
	for id, lapsed := range c.suspects.take() {
		if err := c.peers.ForgetUnseenSince(ctx, id, lapsed); err != nil {
			c.loopError(ctx, err)
			return
		}
	}
}
