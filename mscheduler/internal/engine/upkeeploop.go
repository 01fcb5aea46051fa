package engine

import (
	"context"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/peers"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// The upkeep loop is the consumer's owner loop for announcing the
// consumer and, for the holder of the collection's maintenance lease, the
// maintenance pass and the check. It runs beside the claim loop and the
// sweep loop (sweeploop.go) so that none waits on another: on a slow
// server a maintenance pass of several commands must not hold back a
// claim or a sweep, and a backlog of claims must not starve the sweep
// that rescues a dead worker's runs.

// upkeepState belongs to the upkeep loop goroutine alone.
type upkeepState struct {
	checkAt time.Time
	// maintainAt is the next try at the maintenance lease; ttl says
	// whether the server deletes expired documents itself.
	maintainAt time.Time
	ttl        upkeep.TTL
	announceAt time.Time
	announced  time.Time // the last announce
	// peersGone are the consumers the last announce found lapsed, for the
	// maintenance holder to forget.
	peersGone []string
	// quiet stretches the maintenance pass and the check of a quiet
	// collection (see quiet.go); activity is the engine's activity as the
	// last pass saw it. The lease is renewed every interval all the same.
	quiet    quiet
	activity uint64
	passedAt time.Time // the last maintenance pass
	// announceActivity and leaseActivity are the engine's activity as
	// the last announce and the last try at the maintenance lease saw it
	// (see quietUpkeep).
	announceActivity, leaseActivity uint64
}

// peerView is what the newest announce or look learnt of the consumers
// alive: how many (this one included) and this one's place among them, as
// of when its command was sent (monotonic). Written by the upkeep loop
// (and Start) at each announce and by the claim loop at its look (see
// lookAtPeers), newest first; read by both.
type peerView struct {
	alive, rank int
	asOf        time.Time
}

// storeView keeps v unless a newer view was stored meanwhile: an announce
// and a look may cross.
func (c *Engine) storeView(v peerView) {
	for {
		old := c.peerView.Load()
		if old != nil && old.asOf.After(v.asOf) {
			return
		}
		if c.peerView.CompareAndSwap(old, &v) {
			return
		}
	}
}

// upkeepLoop runs the upkeep until ctx is done. The first announce was
// made by Start.
func (c *Engine) upkeepLoop(ctx context.Context, st *upkeepState) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		c.announceIfDue(ctx, st)
		c.maintainIfDue(ctx, st)
		c.checkIfDue(ctx, st)
		next := minTime(st.checkAt, st.maintainAt, st.announceAt)
		timer.Reset(max(next.Sub(c.clock.Now()), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-c.reannounce:
			c.announceSoon(st)
		case <-timer.C:
		}
	}
}

// view is the consumers alive as the last announce saw them: this one
// alone before the first.
func (c *Engine) view() peerView {
	if v := c.peerView.Load(); v != nil {
		return *v
	}
	return peerView{alive: 1}
}

// askReannounce asks the upkeep loop to announce again soon (see
// viewMayBeStale). Called by the claim loop; never blocks.
func (c *Engine) askReannounce() {
	select {
	case c.reannounce <- struct{}{}:
	default:
	}
}

// announceSoon brings the next announce forward to now, or to
// reannounceGap after the last one if that is later.
func (c *Engine) announceSoon(st *upkeepState) {
	at := maxTime(c.clock.Now(), st.announced.Add(reannounceGap))
	if at.Before(st.announceAt) {
		st.announceAt = at
	}
}

// announce records this consumer as alive and takes in what the reply
// says of the others.
func (c *Engine) announce(ctx context.Context, st *upkeepState) error {
	c.forgetSuspects(ctx)
	now := c.clock.Now()
	st.announced = now
	start := time.Now()
	view, err := c.peers.Announce(ctx, now, c.aliveWindow(now))
	if err != nil {
		return err
	}
	c.commandTook(time.Since(start))
	c.storeView(peerView{alive: view.Alive, rank: view.Rank, asOf: start})
	st.peersGone = view.Gone
	return nil
}

// announceIfDue announces this consumer when its time has come: at start,
// then once more within announceSoon, then every MaintenanceInterval, and
// when the claim loop brought it forward (see viewMayBeStale); after a
// failure, within announceSoon.
func (c *Engine) announceIfDue(ctx context.Context, st *upkeepState) {
	now := c.clock.Now()
	if now.Before(st.announceAt) {
		return
	}
	every := c.quietUpkeep(&st.announceActivity, c.cfg.MaintenanceInterval)
	if st.announceAt.IsZero() {
		every = min(every, announceSoon)
	}
	st.announceAt = now.Add(jitter(every))
	if err := c.announce(ctx, st); err != nil {
		// The last view is the better guess: alone, this consumer would
		// take every share at once. Soon again, as at start.
		c.loopError(ctx, err)
		st.announceAt = now.Add(jitter(min(every, announceSoon)))
	}
}

// maintainIfDue takes or renews the maintenance lease when its time has
// come, and does the pass if this worker holds it.
func (c *Engine) maintainIfDue(ctx context.Context, st *upkeepState) {
	now := c.clock.Now()
	if now.Before(st.maintainAt) {
		return
	}
	st.maintainAt = now.Add(jitter(c.quietUpkeep(&st.leaseActivity, c.cfg.MaintenanceInterval)))
	start := time.Now()
	defer func() {
		c.log.Debug("maintenance turn", "leader", c.leader.Load(), "took", time.Since(start).Round(time.Millisecond))
	}()
	leader, err := c.upkeep.TakeMaintenance(ctx, now, 3*c.cfg.MaintenanceInterval)
	c.leader.Store(leader)
	if err != nil {
		c.loopError(ctx, err)
		return
	}
	if leader && c.passDue(st, now) {
		c.upkeep.Maintain(ctx, now, &st.ttl)
		alive := c.aliveWindow(now)
		if err := c.peers.Forget(ctx, st.peersGone, &alive); err != nil {
			c.loopError(ctx, err)
		}
	}
}

// passDue says the maintenance pass is due: at every turn while the
// collection shows signs of work, and while it is quiet, at every turn of
// a stretch that doubles up to quietMaintainMax. A quiet collection has
// little to maintain: what finished before the last pass was seen to by
// it, and only its retention deadlines come due meanwhile.
func (c *Engine) passDue(st *upkeepState, now time.Time) bool {
	switch a := c.activity.Load(); {
	case a != st.activity:
		st.activity = a
		st.quiet.stir()
	case st.passedAt.IsZero() || !now.Before(st.passedAt.Add(st.quiet.stretch(c.cfg.MaintenanceInterval))):
		st.quiet.calm(quietMaintainMax)
	default:
		return false
	}
	st.passedAt = now
	return true
}

// checkIfDue runs a check when its time has come, by the maintenance
// lease holder alone: N workers cost the server one.
func (c *Engine) checkIfDue(ctx context.Context, st *upkeepState) {
	now := c.clock.Now()
	if now.Before(st.checkAt) {
		return
	}
	// Stretched with the maintenance pass while the collection is quiet.
	st.checkAt = now.Add(jitter(st.quiet.stretch(c.cfg.CheckInterval)))
	if !c.leader.Load() {
		return
	}
	start := time.Now()
	again, err := c.upkeep.Check(ctx, now)
	c.log.Debug("checked", "took", time.Since(start).Round(time.Millisecond), "error", err)
	if err != nil {
		c.loopError(ctx, err)
	}
	if again {
		st.checkAt = now // the rest at the next turn of the loop
	}
}

// aliveWindow is when a consumer alive at now was last seen: within
// peerLapse maintenance intervals, and not later than one interval ahead
// (consumers' clocks are the server's, give or take a round trip; a time
// further ahead was edited by hand and would count for ever).
func (c *Engine) aliveWindow(now time.Time) peers.Window {
	return peers.Window{From: now.Add(-peerLapse * c.cfg.MaintenanceInterval), To: now.Add(c.cfg.MaintenanceInterval)}
}

// MaintenanceLeader reports whether this consumer held the collection's
// maintenance lease at its last try.
func (c *Engine) MaintenanceLeader() bool { return c.leader.Load() }

// quietUpkeep is how long after now the next announce or try at the
// maintenance lease comes: every, or, while the collection shows no sign
// of work since the last (seen holds the activity it saw), twice that.
// Not more: a consumer is alive while seen within peerLapse intervals,
// and the maintenance lease lasts three.
func (c *Engine) quietUpkeep(seen *uint64, every time.Duration) time.Duration {
	a := c.activity.Load()
	quiet := a == *seen
	*seen = a
	if quiet {
		return quietUpkeepStretch * every
	}
	return every
}
