package mscheduler

import (
	"context"
	"time"
)

// MaintenanceIntervalDefault is the default ConsumerConfig.MaintenanceInterval.
const MaintenanceIntervalDefault = time.Minute

// The maintenance of a collection (retention deletes where the server
// has no TTL index, history records left unwritten, the check) is done by
// the worker holding its maintenance lease: see internal/upkeep.

// maintainIfDue takes or renews the maintenance lease when its time has
// come, and does the pass if this worker holds it. Run by the claim loop.
func (c *Consumer[P, R]) maintainIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.maintainAt) {
		return
	}
	st.maintainAt = now.Add(jitter(c.cfg.MaintenanceInterval))
	leader, err := c.upkeep.TakeMaintenance(ctx, now, 3*c.cfg.MaintenanceInterval)
	c.leader.Store(leader)
	if err != nil {
		c.loopError(ctx, err)
		return
	}
	if leader {
		c.upkeep.Maintain(ctx, now, &st.ttl)
		alive := c.aliveWindow(now)
		if err := c.peers.Forget(ctx, st.peersGone, &alive); err != nil {
			c.loopError(ctx, err)
		}
	}
}

// MaintenanceLeader reports whether this consumer held the collection's
// maintenance lease at its last try.
func (c *Consumer[P, R]) MaintenanceLeader() bool { return c.leader.Load() }
