package mscheduler

import (
	"context"
)

// sweepIfDue runs a sweep when its time has come, run by the claim loop.
func (c *Consumer[P, R]) sweepIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.sweepAt) {
		return
	}
	interval := jitter(c.spreadOut(c.cfg.SweepInterval, st.peers))
	st.sweepAt = now.Add(interval)
	next, err := c.upkeep.Sweep(ctx, &st.sweepSkips, now, st.sweepAt)
	// The interval counts from the sweep's end: a slow sweep (a slow
	// server, many lapsed leases) must leave time for claims.
	st.sweepAt = c.clock.Now().Add(interval)
	if err != nil {
		c.loopError(ctx, err)
		return
	}
	if !next.IsZero() && next.Before(st.sweepAt) {
		st.sweepAt = next
	}
}
