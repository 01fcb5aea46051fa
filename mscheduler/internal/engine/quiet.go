package engine

import (
	"sync/atomic"
	"time"
)

// A consumer whose collection is quiet stretches its own polls and sweeps,
// so that a process serving many task collections, most of them idle most
// of the time, does not query each of them every second. After
// quietAfterPolls polls in a row that found nothing and were not brought
// by a wake, each such poll doubles the claim loop's poll; each sweep that
// saw no run held (after one that saw none either) doubles the sweep
// interval; each maintenance turn of a quiet collection doubles the span
// between maintenance passes; each up to a cap; anything that happens in
// the collection (a wake: a change stream event, a publish or a run end
// in this process, a claim won) brings both back to their intervals at
// once. Tasks due later are timed, not polled (see claimState.due), so a
// quiet consumer runs them on time all the same.
//
// The caps differ by how the consumer learns of work. With a change
// stream, every write that can make a slot claimable, a claim among them,
// wakes the consumer, so the poll only covers what a stream can miss and
// the sweep only the runs of claims it was told of. Without one, a task
// published by another process is found by the poll alone, and a run
// claimed by another process by the sweep alone: both stretch little.
const (
	quietPollMaxStream  = 16 // × ChangeStreamPollInterval (15 s by default): 4 minutes
	quietPollMaxPoll    = 4  // × PollInterval (1 s by default)
	quietSweepMaxStream = 32 // × SweepInterval (5 s by default): under 3 minutes
	quietSweepMaxPoll   = 4
	// quietMaintainMax bounds the stretch of the maintenance pass and the
	// check of a quiet collection, whatever the discovery: × the
	// MaintenanceInterval and CheckInterval (a minute each by default).
	quietMaintainMax = 8
	// quietAfterPolls is how many polls in a row find nothing before the
	// poll stretches.
	quietAfterPolls = 4
	// quietUpkeepStretch stretches the announces and the tries at the
	// maintenance lease of a quiet consumer: at most 2.4 intervals apart
	// with the jitter, within the three of peerLapse and of the lease.
	quietUpkeepStretch = 2
)

// quiet is how far a quiet consumer stretches an interval: a factor from
// 1 (not quiet) doubling up to a cap. Its owner loop alone changes it;
// shown, when set, receives each new factor for others to read.
type quiet struct {
	factor int
	shown  *atomic.Int32
}

// calm doubles the factor, up to limit.
func (q *quiet) calm(limit int) { q.set(min(max(q.factor, 1)*2, limit)) }

// stir brings the factor back to 1.
func (q *quiet) stir() { q.set(1) }

func (q *quiet) set(f int) {
	q.factor = f
	if q.shown != nil {
		q.shown.Store(int32(f))
	}
}

// QuietFactors are the factors the claim loop's poll and the sweep loop's
// interval are stretched by now, for tests and the curious.
func (c *Engine) QuietFactors() (poll, sweep int) {
	return max(int(c.quietPoll.Load()), 1), max(int(c.quietSweep.Load()), 1)
}

// stretch is d stretched by the factor.
func (q *quiet) stretch(d time.Duration) time.Duration { return d * time.Duration(max(q.factor, 1)) }

// quietCaps are the caps of the poll and the sweep for how the consumer
// learns of work now.
func (c *Engine) quietCaps() (poll, sweep int) {
	switch {
	case c.stream.Delivering():
		return quietPollMaxStream, quietSweepMaxStream
	case c.poll.Serving():
		// The shared poll finds what is due; the sweep alone still finds
		// the runs other processes claim.
		return quietPollMaxStream, quietSweepMaxPoll
	}
	return quietPollMaxPoll, quietSweepMaxPoll
}
