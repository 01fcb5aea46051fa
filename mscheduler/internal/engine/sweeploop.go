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
	// quiet stretches the interval while sweeps see no run held and the
	// collection shows no sign of work (see quiet.go); activity is the
	// engine's activity as the last sweep saw it; empty says the last
	// sweep saw no run held, so the next looks as far ahead as the longest
	// stretch before it calms (see sweepHorizon).
	quiet    quiet
	activity uint64
	empty    bool
}

// sweepLoop sweeps until ctx is done.
func (c *Engine) sweepLoop(ctx context.Context) {
	st := &sweepState{quiet: quiet{shown: &c.quietSweep}}
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
	if a := c.activity.Load(); a != st.activity {
		// Work in the collection: a run may be held that no sweep saw.
		st.activity = a
		st.quiet.stir()
	}
	if now.Before(c.sweepDue(st)) {
		return
	}
	st.sweptAt, st.span, st.next = now, jitterFactor(), time.Time{}
	start := time.Now()
	next, held, err := c.upkeep.Sweep(ctx, &st.skips, now, c.sweepHorizon(st, now))
	// For a person asking why a lapsed lease stayed: when sweeps ran and
	// how long they took.
	c.log.Debug("swept", "took", time.Since(start).Round(time.Millisecond), "error", err)
	// The interval counts from the sweep's end: on a slow server, sweeps
	// back to back would be most of the load.
	st.sweptAt = c.clock.Now()
	switch {
	case err != nil:
		c.loopError(ctx, err)
		st.quiet.stir()
		st.empty = false
	case !held:
		if st.empty {
			_, sweepCap := c.quietCaps()
			st.quiet.calm(sweepCap)
		}
		st.empty = true
	default:
		st.next = next // zero: no holder is overdue, the next sweep comes as planned
		st.quiet.stir()
		st.empty = false
	}
}

// sweepHorizon is how far ahead a sweep reads the leases: to its next due
// time, or, after a sweep that saw no run held, as far as the longest
// stretch of a quiet consumer's sweeps. Such a sweep sees every run held
// whose lease ends before the next sweep however stretched, and has the
// next sweep come when the first of them lapses: a quiet consumer stretches
// its sweeps only while no run is held.
func (c *Engine) sweepHorizon(st *sweepState, now time.Time) time.Time {
	due := c.sweepDue(st)
	if !st.empty {
		return due
	}
	_, sweepCap := c.quietCaps()
	return maxTime(due, now.Add(time.Duration(sweepCap)*c.spreadOut(c.cfg.SweepInterval, c.view().alive)))
}

// sweepDue is when the next sweep is due: a span of SweepInterval spread
// out by the consumers alive now (see spreadOut) after the last, or the
// first lease the last sweep saw to lapse, if sooner. Spread by the
// consumers alive now, not when the last sweep ran: consumers started
// together each learn of the others one announce at a time, and those
// that swept first knowing of few would otherwise go on sweeping as if
// they were few until their next sweep.
func (c *Engine) sweepDue(st *sweepState) time.Time {
	spread := st.quiet.stretch(c.spreadOut(c.cfg.SweepInterval, c.view().alive))
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
