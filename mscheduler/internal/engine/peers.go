package engine

import (
	"context"
	"time"
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

// peerLapse is how many maintenance intervals a consumer may go unseen
// before it no longer counts as alive; the maintenance holder removes it.
const peerLapse = 3

// announceSoon bounds the wait for the second announce, so that workers
// started together learn of each other soon, not a maintenance interval
// later.
const announceSoon = 5 * time.Second

// reannounceGap bounds how often claims that lost tasks bring the next
// announce forward.
const reannounceGap = time.Second

// viewMayBeStale asks for an announce soon when the last claim says the
// view of the consumers alive, which the shares rest on, may be stale: the
// first claim that found work (consumers started together announced one
// after the other, the first knowing of few of the others), and a batch
// claim that lost tasks (a consumer joined since, and took tasks of the
// share this one still thinks its own). The upkeep loop announces at most
// once per reannounceGap for it.
func (c *Engine) viewMayBeStale(st *claimState, won bool) {
	first := (st.backlog || won) && !st.workFound
	st.workFound = st.workFound || st.backlog || won
	if first || st.lostTasks {
		c.askReannounce()
	}
	st.lostTasks = false
}

// lookAtPeers reads the consumers alive again, once, when the first claim
// read that found work comes back, and chooses by what it says. Consumers
// started together announce one after the other, each knowing only of
// those before it: their first reads chose by counts of peers from 1 to
// N, the shares moved at their next announces, and the spares of those
// reads were dropped and read again (a scan each on a server without
// indexes) while claims of the moved shares lost their tasks to one
// another. By the time a read comes back, the others have announced. The
// view looked at is kept for the upkeep loop too (see storeView); on an
// error the announced view stands.
func (c *Engine) lookAtPeers(ctx context.Context, st *claimState) {
	if st.peersLooked {
		return
	}
	st.peersLooked = true
	sent := time.Now()
	view, ok, err := c.peers.Look(ctx, c.aliveWindow(c.clock.Now()))
	if err != nil || !ok {
		c.log.Debug("kept the announced view of the consumers alive", "error", err)
		return
	}
	c.commandTook(time.Since(sent))
	c.storeView(peerView{alive: view.Alive, rank: view.Rank, asOf: sent}) // ok: this consumer is among them
	st.adoptView(c.view())
}

// spreadOut stretches an interval d by peers/PollBudget, when more than
// PollBudget consumers are alive.
func (c *Engine) spreadOut(d time.Duration, peers int) time.Duration {
	b := c.cfg.PollBudget
	if b == NoPollBudget || peers <= b {
		return d
	}
	return d * time.Duration(peers) / time.Duration(b)
}
