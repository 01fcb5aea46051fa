package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/dbpoll"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Without a change stream, the consumers of a process poll each database
// they serve with one command (see dbpoll): each is woken when its part
// finds a task due, and timed for the next due time it finds. Their own
// polls are then a fallback, as with a stream.

// newPollProbe is the consumer's part of its database's poll.
func (c *Engine) newPollProbe() *dbpoll.Probe {
	return &dbpoll.Probe{
		Coll:     c.coll,
		Eligible: c.pollEligible,
		Interval: func() time.Duration { return c.spreadOut(c.cfg.PollInterval, c.view().alive) },
		Saw:      c.pollSaw,
		Failed: func(err error) {
			// Told by the claim loop (sayPollFailed), not on the poll's
			// goroutine, which serves every consumer of the database.
			c.pollErr.Store(&err)
			c.wake() // the claim loop takes its own poll interval back
		},
	}
}

// sayPollFailed reports a failure of the shared poll, once told. Called
// by the claim loop.
func (c *Engine) sayPollFailed(ctx context.Context) {
	if err := c.pollErr.Swap(nil); err != nil && ctx.Err() == nil {
		c.log.Warn("the database's shared poll failed; polling on its own until it is back", "error", *err)
		c.emit(Event{Kind: EventError, Err: *err})
	}
}

// pollEligible is what the claim loop's claims would select, but for the
// time: the tasks skipped now (as of the last pass's list) are left out.
// Nil while every slot is taken, or no claim is demanded (ClaimDemand):
// no wake could start a claim, and the part would cost the server a read
// for nothing.
func (c *Engine) pollEligible() bson.D {
	if c.held.Load() >= int64(c.cfg.Capacity) || c.demanded(1) <= 0 {
		return nil
	}
	var skipped []string
	if p := c.skippedNow.Load(); p != nil {
		now := c.clock.Now()
		for _, s := range *p {
			if now.Before(s.until) {
				skipped = append(skipped, s.key)
			}
		}
	}
	return taskstate.Claimant{WorkerID: c.cfg.WorkerID, Groups: c.cfg.Groups, Skipped: skipped}.Eligible()
}

// pollSaw wakes the claim loop for a task due, or when the next one will
// be. Each poll tells the earliest afresh, so the timer takes each time.
func (c *Engine) pollSaw(runAt time.Time) {
	wait := runAt.Sub(c.clock.Now())
	if wait <= 0 {
		c.wake()
		return
	}
	c.dueMu.Lock()
	defer c.dueMu.Unlock()
	if c.dueTimer == nil {
		c.dueTimer = time.AfterFunc(wait, c.wake)
		return
	}
	c.dueTimer.Reset(wait)
}

// stopDueTimer ends the shared poll's timing of the next due task.
func (c *Engine) stopDueTimer() {
	c.dueMu.Lock()
	defer c.dueMu.Unlock()
	if c.dueTimer != nil {
		c.dueTimer.Stop()
	}
}

// pollServed says the consumer learns of work by a change stream or by
// its database's shared poll: its own poll is a fallback.
func (c *Engine) pollServed() bool { return c.stream.Delivering() || c.poll.Serving() }
