package engine

import (
	"time"
)

// gathering holds a claim back, with work waiting, while fewer slots are
// free than a batch fills (every slot the limit allows, at most
// ClaimBatchMax), or while runs of this consumer are writing their ends,
// and the gather window has not passed since the first was held back:
// runs going free their slots soon (the runs of one end batch all at once,
// as its reply comes), and a claim of many costs what a claim of a few
// does. Claims that split the slots in two cohorts, each claimed as the
// other runs, would cost twice the commands for good. A consumer the limit
// holds back does not gather: its pass counts what it leaves unclaimed.
func (c *Engine) gathering(st *claimState, now time.Time) bool {
	ending := c.ending.Load() // before held: a run lowers held first
	room := c.allowedMore()
	fill := min(c.cfg.ClaimBatchMax, c.cfg.Capacity, c.limiter.Limit())
	if !st.backlog || c.cfg.ClaimBatchWindow <= 0 || c.cfg.Capacity < minGatherCapacity || room <= 0 || room >= fill && ending == 0 {
		st.gatherUntil = time.Time{}
		return false
	}
	if st.gatherUntil.IsZero() {
		st.gatherUntil = now.Add(c.gatherWindow())
	}
	if now.Before(st.gatherUntil) {
		return true
	}
	st.gatherUntil = time.Time{}
	return false
}

// minGatherCapacity is the least capacity at which claims gather: below
// it, slots are too few for a claim of them all to beat claims as they
// free.
const minGatherCapacity = 8

// gatherWindow is how long a claim waits for more free slots:
// ClaimBatchWindow, or the server's current round trip if that is longer
// (about what the next batch of run ends takes to land). On a server that
// answers slowly, or is busy with the other workers' commands, a claim of
// a few costs what one of many does, and waiting a round trip for more
// slots costs less than a claim.
func (c *Engine) gatherWindow() time.Duration {
	return min(max(c.cfg.ClaimBatchWindow, c.limiter.Latency()), maxGatherWindow)
}

// maxGatherWindow bounds gatherWindow, whatever the latency.
const maxGatherWindow = time.Second
