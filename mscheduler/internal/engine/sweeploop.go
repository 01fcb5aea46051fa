package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// The sweep loop is the consumer's owner loop for sweeps: it frees the
// runs whose lease lapsed. It runs on its own, beside the upkeep loop and
// the claim loop, because a sweep is how a dead worker's runs come back:
// on a slow server a maintenance pass or a check of several commands took
// longer than the leases the sweep keeps short (a turn of 25 s was seen),
// and a sweep waiting behind it left lapsed leases held that long.

// sweepState belongs to the sweep loop goroutine alone.
type sweepState struct {
	// sweptAt is when the last sweep ended (at start, when the loop
	// began), span how many spread-out sweep intervals after it the next
	// is due, and next, when set, the first lease the last sweep saw to
	// lapse: due says from them when the next sweep is due.
	sweptAt time.Time
	span    float64
	next    time.Time
	skips   upkeep.SweepSkips
}

// sweepLoop sweeps until ctx is done.
func (c *Engine) sweepLoop(ctx context.Context) {
	st := &sweepState{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		c.sweepIfDue(ctx, st)
		// Looked at again within a sweep interval at most: the spread
		// follows the consumers alive (see sweepDue), and when some are
		// gone, this one's share comes sooner than planned.
		wait := min(c.sweepDue(st).Sub(c.clock.Now()), c.cfg.SweepInterval)
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// sweepIfDue runs a sweep when its time has come (see sweepDue).
func (c *Engine) sweepIfDue(ctx context.Context, st *sweepState) {
	now := c.clock.Now()
	if st.sweptAt.IsZero() {
		c.planFirstSweep(st, now)
	}
	if now.Before(c.sweepDue(st)) {
		return
	}
	st.sweptAt, st.span, st.next = now, jitterFactor(), time.Time{}
	start := time.Now()
	next, err := c.upkeep.Sweep(ctx, &st.skips, now, c.sweepDue(st))
	// For a person asking why a lapsed lease stayed: when sweeps ran and
	// how long they took.
	c.log.Debug("swept", "took", time.Since(start).Round(time.Millisecond), "error", err)
	// The interval counts from the sweep's end: on a slow server, sweeps
	// back to back would be most of the load.
	st.sweptAt = c.clock.Now()
	if err != nil {
		c.loopError(ctx, err)
	} else {
		st.next = next
	}
}

// sweepDue is when the next sweep is due: a span of SweepInterval spread
// out by the consumers alive now (see spreadOut) after the last, or the
// first lease the last sweep saw to lapse, if sooner. Spread by the
// consumers alive now, not when the last sweep ran: consumers started
// together each learn of the others one announce at a time, and those
// that swept first knowing of few would otherwise go on sweeping as if
// they were few until their next sweep.
func (c *Engine) sweepDue(st *sweepState) time.Time {
	spread := c.spreadOut(c.cfg.SweepInterval, c.view().alive)
	at := st.sweptAt.Add(time.Duration(st.span * float64(spread)))
	if !st.next.IsZero() && st.next.Before(at) {
		return st.next
	}
	return at
}

// planFirstSweep has a consumer sweep at once, or, if it joins more than
// PollBudget of them, at a random point of its spread-out interval, as if
// it had been sweeping all along. Consumers started together each swept
// at once, a scan each on a server without indexes, while those alive
// before them had the collection swept within SweepInterval anyway.
func (c *Engine) planFirstSweep(st *sweepState, now time.Time) {
	st.sweptAt, st.span = now, 0
	if c.spreadOut(c.cfg.SweepInterval, c.view().alive) > c.cfg.SweepInterval {
		st.span = rand.Float64()
	}
}
