package mscheduler

import (
	"context"
)

// checkIfDue runs a check when its time has come, run by the claim loop
// of the maintenance lease holder alone: N workers cost the server one.
func (c *Consumer[P, R]) checkIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.checkAt) {
		return
	}
	st.checkAt = now.Add(jitter(c.cfg.CheckInterval))
	if !c.leader.Load() {
		return
	}
	again, err := c.upkeep.Check(ctx, now)
	if err != nil {
		c.loopError(ctx, err)
	}
	if again {
		st.checkAt = now // the rest at the next pass of the loop
		c.wake()
	}
}
