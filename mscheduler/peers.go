package mscheduler

import (
	"context"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/peers"
)

// Idle workers poll, look for the next due task and sweep on timers, so
// that without a change stream N of them would cost the server N times
// what one costs while none has work. Consumers therefore announce
// themselves in the collection's metadata ({_id: "consumers"} in
// <name>.meta: the server time each was last seen, by worker id) every
// maintenance interval, learn from the reply how many are alive, and with N
// alive and PollBudget B < N each polls and sweeps N/B times less often.
// Together they then cost what B consumers cost, and a task published by
// another process is still found within PollInterval/B on average: the
// collection is polled B times per PollInterval, by whoever comes first.

// PollBudgetDefault is the default ConsumerConfig.PollBudget.
const PollBudgetDefault = 2

// NoPollBudget, as ConsumerConfig.PollBudget, has every consumer poll and
// sweep at its own intervals however many there are.
const NoPollBudget = -1

// peerLapse is how many maintenance intervals a consumer may go unseen
// before it no longer counts as alive; the maintenance holder removes it.
const peerLapse = 3

// announceSoon bounds the wait for the second announce, so that workers
// started together learn of each other soon, not a maintenance interval
// later.
const announceSoon = 5 * time.Second

// announceIfDue announces this consumer when its time has come: at start,
// then once more within announceSoon, then every MaintenanceInterval, and
// when the last claim brought it forward (see viewMayBeStale); after a
// failure, within announceSoon. Run by the claim loop.
func (c *Consumer[P, R]) announceIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.announceAt) {
		return
	}
	every := c.cfg.MaintenanceInterval
	if st.announceAt.IsZero() {
		every = min(every, announceSoon)
	}
	st.announceAt, st.announced = now.Add(jitter(every)), now
	view, err := c.peers.Announce(ctx, now, c.aliveWindow(now))
	if err != nil {
		// The last view is the better guess: alone, this consumer would
		// take every share at once. Soon again, as at start.
		c.loopError(ctx, err)
		st.announceAt = now.Add(jitter(min(every, announceSoon)))
		return
	}
	if view.Alive != st.peers || view.Rank != st.rank {
		st.spares.Drop() // chosen by shares that moved
	}
	st.peers, st.rank, st.peersGone = view.Alive, view.Rank, view.Gone
}

// reannounceGap bounds how often claims that lost tasks bring the next
// announce forward.
const reannounceGap = time.Second

// viewMayBeStale brings the next announce forward when the last claim
// says the view of the consumers alive, which the shares rest on, may be
// stale: the first claim that found work waiting (consumers started
// together announced one after the other, the first knowing of few of the
// others), and a batch claim that lost tasks, once reannounceGap has
// passed since the last announce (a consumer joined since, and took tasks
// of the share this one still thinks its own).
func (st *claimState) viewMayBeStale(now time.Time) {
	first := st.backlog && !st.workFound
	st.workFound = st.workFound || st.backlog
	if (first || st.lostTasks && now.Sub(st.announced) >= reannounceGap) && now.Before(st.announceAt) {
		st.announceAt = now
	}
	st.lostTasks = false
}

// aliveWindow is when a consumer alive at now was last seen: within
// peerLapse maintenance intervals, and not later than one interval ahead
// (consumers' clocks are the server's, give or take a round trip; a time
// further ahead was edited by hand and would count for ever).
func (c *Consumer[P, R]) aliveWindow(now time.Time) peers.Window {
	return peers.Window{From: now.Add(-peerLapse * c.cfg.MaintenanceInterval), To: now.Add(c.cfg.MaintenanceInterval)}
}

// spreadOut stretches an interval d by peers/PollBudget, when more than
// PollBudget consumers are alive.
func (c *Consumer[P, R]) spreadOut(d time.Duration, peers int) time.Duration {
	b := c.cfg.PollBudget
	if b == NoPollBudget || peers <= b {
		return d
	}
	return d * time.Duration(peers) / time.Duration(b)
}
