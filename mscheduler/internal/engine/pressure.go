package engine

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
)

// A worker measures how long the server takes to answer its own commands
// (claims, pings, run ends, sweeps) and holds fewer runs when that grows:
// see internal/pressure for the rule (additive increase, multiplicative
// decrease against the lowest round trip of the last 30 s, and nothing new
// taken while a claim and its first ping would not fit in a lease).

// errWriteTimeout is the cause of a write given up after WriteTimeout.
var errWriteTimeout = errors.New("mscheduler: write timed out (WriteTimeout)")

// Pressure is what a consumer knows of the server's load, from its own
// commands.
type Pressure struct {
	// Limit is how many runs the consumer may hold now: Capacity when the
	// server answers as fast as it did, less when it slowed down, 0 while
	// a claim and its first ping would not fit in the shortest lease.
	Limit int
	// Latency is the recent average round trip of the consumer's
	// commands; Baseline the lowest of the last 30 s.
	Latency, Baseline time.Duration
	// HeldBack counts free slots left unclaimed because of the limit.
	HeldBack int64
	// Retries counts commands sent again after a failure; RetriesWaited
	// those of them that waited for the retry budget.
	Retries, RetriesWaited int64
}

// Pressure reports what the consumer knows of the server's load.
func (c *Engine) Pressure() Pressure {
	granted, waited := c.retries.Counts()
	limit := c.limiter.Limit()
	if c.tooSlowToStretch() {
		limit = 0
	}
	return Pressure{Limit: limit, Latency: c.limiter.Latency(), Baseline: c.limiter.Baseline(),
		HeldBack: c.limiter.HeldBack(), Retries: granted, RetriesWaited: waited}
}

// allowedMore is how many more runs the consumer may hold now. While the
// server is slow, pings near their lease and run ends being written go
// before new claims: none is sent until they are answered.
func (c *Engine) allowedMore() int {
	if c.limiter.Throttled() && (c.ending.Load() > 0 || c.pinger.Pressed()) || c.tooSlowToStretch() {
		return 0
	}
	return c.limiter.Limit() - int(c.held.Load())
}

// Runs whose task's worker timeout the server is too slow to keep get a
// longer lease (see pressure.Limiter.Stretch), recorded on the holder as
// lease_ms, and as its lease_until from the claim on: the task runs,
// slower, rather than stay pending. Workers that do not read lease_ms
// (earlier versions) read the claim's lease_until as the run's lease, as
// it is not ClaimLease after the start (see taskstate.EffectiveLease). A
// lease of ClaimLease or more is not stretched to: the server takes
// seconds a round trip, and runs of leases it cannot keep are not claimed
// until it answers faster.
const maxStretch = claimLease

// tooSlowToStretch says a run of the shortest lease seen would need a
// lease of maxStretch or more. A consumer that has seen no lease yet has
// nothing it cannot keep: its first claim reads the tasks' timeouts.
func (c *Engine) tooSlowToStretch() bool {
	need, to := c.limiter.Stretch()
	return stretchFails(need, to, c.limiter.ShortestLease())
}

// stretchFails says a lease of shortest (0: none seen) is not kept, at a
// Stretch of need and to, even stretched.
func stretchFails(need, to, shortest time.Duration) bool {
	return shortest > 0 && to >= maxStretch && need >= shortest
}

// runLease is the lease a run of a task whose lease is lease (0: not
// read) holds when claimed in this pass.
func (st *claimState) runLease(lease time.Duration) time.Duration {
	if to := st.stretchFor(lease); to > 0 {
		return to
	}
	if lease <= 0 {
		return st.leases.shortest()
	}
	return lease
}

// stretchFor is the lease lease_ms records for a run whose task's lease
// is lease, by the stretch the pass took (st.stretch): 0 when the task's
// own holds.
func (st *claimState) stretchFor(lease time.Duration) time.Duration {
	if lease <= 0 {
		lease = st.leases.shortest()
	}
	if st.stretch.need == 0 || lease > st.stretch.need || st.stretch.to >= maxStretch {
		return 0
	}
	return st.stretch.to
}

// holdBack ends a claim pass that the limit stops: the free slots left
// are counted, and the loop looks again when the limit may have moved. A
// consumer taking nothing new and holding no run sends no other command
// to measure the server by: it sends the cheapest one.
func (c *Engine) holdBack(ctx context.Context, st *claimState) {
	free := c.cfg.Capacity - int(c.held.Load())
	c.limiter.HoldBack(free)
	st.pollAt = minTime(st.pollAt, c.clock.Now().Add(max(c.limiter.Latency(), pressure.MinStep)))
	if c.held.Load() == 0 && c.tooSlowToStretch() {
		start := time.Now()
		if err := c.coll.Database().RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err == nil {
			c.commandTook(time.Since(start))
		}
	}
}

// commandTook takes in the round trip of a command that succeeded.
func (c *Engine) commandTook(d time.Duration) {
	c.limiter.Observe(d)
	c.retries.Succeeded()
}

// pressureChanged says when the consumer takes less, or more again.
func (c *Engine) pressureChanged(ch pressure.Change) {
	args := []any{"limit", ch.Limit, "capacity", ch.Max, "latency", ch.Latency.Round(time.Millisecond), "baseline", ch.Baseline.Round(time.Millisecond)}
	switch {
	case ch.Unkeepable:
		c.log.Warn("server too slow to keep the shortest worker timeout: runs of such tasks get a longer lease, recorded as lease_ms", args...)
	case ch.Limit < ch.Was:
		c.log.Warn("server slow: holding fewer runs", args...)
	case ch.Limit == ch.Max:
		c.log.Info("server answers as before: holding runs up to capacity", args...)
	default:
		c.log.Debug("server answers faster: holding more runs", args...)
	}
}

// monotonicNow is the consumer's monotonic clock as a time.
func monotonicNow(mono func() time.Duration) func() time.Time {
	if mono == nil {
		return time.Now
	}
	base := time.Unix(0, 0)
	return func() time.Time { return base.Add(mono()) }
}

// sayStretched says, once per task (of the last maxStretchedSaid), that a
// run of it holds a longer lease than its worker timeout: the server
// answered too slowly for that one.
func (c *Engine) sayStretched(key string, timeout, lease time.Duration) {
	c.stretchedMu.Lock()
	_, said := c.stretchedSaid[key]
	if !said {
		if c.stretchedSaid == nil || len(c.stretchedSaid) >= maxStretchedSaid {
			c.stretchedSaid = map[string]struct{}{}
		}
		c.stretchedSaid[key] = struct{}{}
	}
	c.stretchedMu.Unlock()
	if !said {
		c.log.Warn("server too slow to keep the task's worker timeout: running it at a longer lease (lease_ms on its run)",
			"key", key, "worker_timeout", timeout, "lease", lease, "latency", c.limiter.Latency().Round(time.Millisecond))
	}
}

// maxStretchedSaid bounds the tasks sayStretched remembers.
const maxStretchedSaid = 1024
