package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/claimchoice"
	"github.com/mscheduler/mscheduler/mscheduler/internal/duetimes"
	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
)

// claimLoop is the consumer's owner loop for claiming. It claims while it
// has free slots and claimable tasks, then sleeps until the earliest of: a
// wake (a publish in this process, a change stream event, a run over, a
// sweep that freed slots), the next due time it knows of (a future
// run_at), or the jittered poll. Sweeps, announces and maintenance are
// the upkeep loop's (see upkeeploop.go).
func (c *Engine) claimLoop(ctx context.Context) {
	st := &claimState{backlog: true} // at start, work may be waiting: see claimSlots
	st.quiet.shown = &c.quietPoll
	timer := time.NewTimer(0)
	defer timer.Stop()
	woken := true
	for {
		// Measured again at once after a wall-clock step. Without a
		// measure, no claim: its lease would rest on a stale clock.
		c.sayPollFailed(ctx)
		clockErr := c.clock.Ensure(ctx, c.coll.Database())
		switch {
		case !woken && !c.claimDue(st):
		case clockErr != nil:
			c.passes.begin()
			c.claimLater(ctx, st, clockErr)
			c.passes.end()
		default:
			c.claimAvailable(ctx, st)
			c.settleQuiet(st, woken)
			c.showSkipped(st)
		}
		timer.Reset(c.untilNextWake(st))
		select {
		case <-ctx.Done():
			return
		case <-c.wakeCh:
			c.activity.Add(1)
			st.quiet.stir()
			// Not while the last claim leaves tasks of other shares for a
			// moment, as for a freed slot below: heldUntil brings the look.
			// With a change stream every run's end is an event, and each
			// would read the candidates again before they are passed over.
			woken = st.heldUntil.IsZero()
		case <-c.slotFreed:
			// A freed slot claims: work may be waiting, or have come since
			// the last look (a look that costs nothing more at low load,
			// where it finds the next task before the poll would). Not
			// while the last claim leaves tasks of other shares for a
			// moment: that look would find them not passed over yet.
			woken = st.heldUntil.IsZero()
		case <-timer.C:
			woken = false
		}
		// Since Go 1.23 Reset leaves no stale tick behind, so no drain.
	}
}

// claimLater puts a due claim off to the next poll, after err. What was
// due is looked at then: left due, it would make every pass due, a loop.
func (c *Engine) claimLater(ctx context.Context, st *claimState, err error) {
	now := c.clock.Now()
	st.pollAt = now.Add(jitter(c.pollInterval()))
	st.due.PopDue(now)
	st.gatherUntil, st.heldUntil = time.Time{}, time.Time{}
	c.loopError(ctx, err)
}

// claimDue says the poll is due, or a time when a task may have become
// claimable has come.
func (c *Engine) claimDue(st *claimState) bool {
	now := c.clock.Now()
	d, ok := st.due.Peek()
	gathered := !st.gatherUntil.IsZero() && !now.Before(st.gatherUntil)
	passed := !st.heldUntil.IsZero() && !now.Before(st.heldUntil)
	return gathered || passed || !now.Before(st.pollAt) || ok && !now.Before(d)
}

// claimState belongs to the claim loop goroutine alone.
type claimState struct {
	due     duetimes.Heap // server times when a task not yet due becomes claimable
	skipped skipList
	pollAt  time.Time
	leases  leaseHint
	// backlog says the last claim found work, so more may wait: the next
	// claim takes every free slot it can. Otherwise it takes one.
	backlog      bool
	claimLatency time.Duration // the round trip of the last claim
	// unconfirmed are claims whose reply was lost: the server may have
	// applied them. Each is looked for until found (and released) or gone.
	unconfirmed []string
	workFound   bool // a claim found work waiting before
	peersLooked bool // lookAtPeers looked already
	lostTasks   bool // the last claim lost tasks to other consumers
	// missedAsRead says a claim of the pass fenced on its task as read
	// missed: the task may still be claimable (see claimBatch).
	missedAsRead bool
	// peers is how many consumers of the collection were alive at the
	// last announce, this one included, and rank this one's place among
	// them (see spreadOut, claimchoice.Choose): the view taken at the
	// start of each pass.
	peers int
	rank  int
	// gatherUntil, when set, is when a claim held back for more free
	// slots goes anyway (see gathering).
	gatherUntil time.Time
	spares      claimchoice.Spares   // for the next claims while work waits
	passOver    claimchoice.PassOver // when candidates of other shares were first seen
	// passAt is when the last pass began; foundNothing says it won
	// nothing and found nothing claimable; quiet stretches the poll of a
	// consumer whose passes find nothing (see quiet.go).
	passAt       time.Time
	foundNothing bool
	emptyPolls   int // polls in a row that found nothing, no wake between
	quiet        quiet
	// stretch is the limiter's Stretch as the pass began: every claim of
	// the pass records the same lease_ms on its run, in its write and in
	// the task as claimed that it builds without a read (claimedAsRead).
	stretch struct{ need, to time.Duration }
	// heldUntil, when set, is when candidates of other shares that the
	// pass's last claim left to their consumers may be taken: the pass
	// ends, and heldUntil brings the next look (freed slots do not, before
	// it). Cleared at each pass.
	heldUntil time.Time
}

// adoptView takes the consumers alive as last announced; spares chosen by
// shares that moved are dropped.
func (st *claimState) adoptView(v peerView) {
	if v.alive != st.peers || v.rank != st.rank {
		st.spares.Drop()
	}
	st.peers, st.rank = v.alive, v.rank
}

// showSkipped gives the shared poll the tasks skipped, with until when.
func (c *Engine) showSkipped(st *claimState) {
	st.skipped.keys(c.clock.Now()) // forgets those expired
	if p := c.skippedNow.Load(); p == nil && len(st.skipped) == 0 || p != nil && slices.Equal(*p, st.skipped) {
		return
	}
	list := slices.Clone(st.skipped)
	c.skippedNow.Store(&list)
}

func (c *Engine) pollInterval() time.Duration {
	if c.pollServed() {
		return c.cfg.ChangeStreamPollInterval
	}
	return c.cfg.PollInterval
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * jitterFactor())
}

// jitterFactor is a random factor from 0.8 to 1.2.
func jitterFactor() float64 { return 0.8 + 0.4*rand.Float64() }

func (c *Engine) untilNextWake(st *claimState) time.Duration {
	now := c.clock.Now()
	next := st.pollAt
	for _, at := range []time.Time{st.gatherUntil, st.heldUntil} {
		if !at.IsZero() && at.Before(next) {
			next = at
		}
	}
	if d, ok := st.due.Peek(); ok && d.Before(next) {
		next = d
	}
	return max(next.Sub(now), time.Millisecond)
}

// claimAvailable claims runs while there are free slots and claimable tasks,
// at most Capacity in one pass: with short tasks slots free up as fast as
// they are claimed, and the pass must end for the loop to look at its
// timers. Several free slots are filled by a batch claim, one by a single
// findAndModify.
func (c *Engine) claimAvailable(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	st.adoptView(c.view())
	poll := c.pollInterval()
	if !st.backlog {
		// Only an idle worker's poll is stretched: one with work waiting
		// is woken by its own run ends, and its poll is the fallback.
		poll = c.spreadOut(poll, st.peers)
	}
	st.pollAt, st.passAt, st.foundNothing = now.Add(jitter(poll)), now, false
	st.due.PopDue(now)
	st.heldUntil = time.Time{}
	st.stretch.need, st.stretch.to = c.limiter.Stretch()
	c.confirmLostClaims(ctx, st)
	if c.gathering(st, now) {
		return // not a look: the look comes when the gathering ends
	}
	c.passes.begin()
	defer c.passes.end()
	// At least one claim per pass, so that sweeps never starve claims.
	wonAny := false
	st.spares.Missed, st.missedAsRead = false, false
	for n := 0; n < c.cfg.Capacity && ctx.Err() == nil; {
		want := min(c.cfg.ClaimBatchMax, c.cfg.Capacity-n)
		if !c.cfg.TargetedClaims && (!st.backlog || want < minBatchClaim && !c.sparesServe(st, want)) {
			// The cheapest claim when one task at a time comes, or when
			// too few slots are free for three commands to beat one each
			// and no spares are kept to claim them with one.
			want = 1
		}
		if want = min(want, c.allowedMore()); want <= 0 {
			c.holdBack(ctx, st)
			return
		}
		if want = c.demanded(want); want <= 0 {
			return // nobody waits for more: Wake brings the loop back
		}
		k := c.takeSlots(want)
		if k == 0 {
			return
		}
		n += k
		won, done, err := c.claimSlots(ctx, st, k)
		st.backlog = err == nil && !done
		c.backlog.Store(st.backlog)
		c.viewMayBeStale(st, len(won) > 0)
		// The slots of statements that won nothing go back before the runs
		// start: whoever watches Holding sees at once that no more runs
		// are coming.
		c.releaseSlots(k - len(won))
		started := 0
		for _, cl := range won {
			if c.admit(cl.raw, cl.runID, st) {
				started++
			}
		}
		runs := c.launchAdmitted()
		if started > 0 {
			c.pinger.Kick()
			c.letFirstPingsGo(ctx, runs, st.claimLatency)
		}
		c.releaseSlots(len(won) - started)
		wonAny = wonAny || len(won) > 0
		if len(won) > 0 {
			c.activity.Add(1)
		}
		switch {
		case err != nil:
			c.loopError(ctx, err)
			return
		case done:
			st.foundNothing = !wonAny
			st.spares.Mixed = false // the next work may be of other tasks
			c.scheduleNextDue(ctx, st)
			return
		case !st.heldUntil.IsZero():
			return // the others' work is looked at again when due
		}
	}
	// The pass ended on its bound with tasks perhaps left: come back at
	// once, unless it won nothing (its statements all lost their tasks to
	// other workers): then at the next poll, not in a loop. A claim from
	// spares that missed comes back at once too, to read afresh (the
	// spares are gone, so this does not loop either), and so does a claim
	// fenced as read that missed a task changed since its read: only
	// another change of that task between the next read and its claim
	// would miss again.
	if wonAny || st.spares.Missed || st.missedAsRead {
		c.wake()
	}
}

// letFirstPingsGo waits for the first pings of the runs just claimed whose
// lease would not cover their first ping if it waited a claim's round trip
// for a connection: the next claim's command, sent at once, takes the
// connection the claim gave back, and on a busy machine the pinger, woken
// by the kick, comes second; with no other connection idle, the ping waits
// for a command to end or a new connection's handshake (a round trip or
// more), and the lease lapsed as it went. On a server that answers within
// a small part of the leases, nothing waits.
func (c *Engine) letFirstPingsGo(ctx context.Context, runs []*lease.Run, claimLatency time.Duration) {
	now := c.clock.Now()
	for _, r := range runs {
		if r.Lease().Sub(now) >= firstPingNeeds(claimLatency) {
			continue
		}
		select {
		case <-r.FirstPinged():
		case <-ctx.Done():
			return
		}
	}
}

// claimCtx bounds a claim: its write, and the read of what it won. It is
// worth waiting for while the leases it takes would leave half their time
// to run, and for WriteTimeout at least. A claim given up on sooner, on a
// server that answers in seconds, is a claim redone: the runs it won are
// found at the next pass and released unrun, their tasks claimed again.
func (c *Engine) claimCtx(lease time.Duration) (context.Context, context.CancelFunc) {
	return retry.Bounded(context.Background(), max(c.cfg.WriteTimeout, lease/2), errWriteTimeout)
}

// demanded bounds a claim of want runs by ClaimDemand: held counts the
// runs claimed and not yet handed to a handler, which the demand does
// not know of yet.
func (c *Engine) demanded(want int) int {
	if c.cfg.ClaimDemand == nil {
		return want
	}
	return min(want, c.cfg.ClaimDemand()-int(c.held.Load()))
}

// minBatchClaim is the fewest free slots a batch claim fills: it costs
// three commands, against one findAndModify per slot.
const minBatchClaim = 4

// sparesServe says a claim of k slots, fewer than a batch fills, goes by
// the spare candidates (see claimchoice.go).
func (c *Engine) sparesServe(st *claimState, k int) bool {
	return st.backlog && st.spares.Serves(k, time.Now(), c.cfg.ClaimSpareFor)
}

// takeSlots takes up to k free slots and returns how many it took.
func (c *Engine) takeSlots(k int) int {
	n := 0
	for n < k && c.slots.TryAcquire(1) {
		n++
	}
	c.held.Add(int64(n))
	return n
}

// releaseSlots gives n slots back.
func (c *Engine) releaseSlots(n int) {
	c.held.Add(-int64(n))
	c.slots.Release(int64(n))
}

// settleQuiet stretches the poll the pass set when the pass, not brought
// by a wake, found nothing and ended a run of quietAfterPolls such polls;
// a pass that found work ends the stretch.
func (c *Engine) settleQuiet(st *claimState, woken bool) {
	switch {
	case !st.foundNothing:
		st.quiet.stir()
		st.emptyPolls = 0
	case woken:
		st.emptyPolls = 0
	default:
		// Only a run of empty polls: between tasks published a few per
		// second from another process, one poll or two find nothing, and
		// a stretch then would delay each next task.
		if st.emptyPolls++; st.emptyPolls < quietAfterPolls {
			return
		}
		pollCap, _ := c.quietCaps()
		st.quiet.calm(pollCap)
		st.pollAt = st.passAt.Add(st.quiet.stretch(st.pollAt.Sub(st.passAt)))
	}
}
