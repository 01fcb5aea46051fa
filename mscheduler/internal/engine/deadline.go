package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/attempt"
	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
)

// attempt calls the handler once, with the task's deadline on its context
// (see internal/attempt). A handler that outlives its cancelled context by
// TimeoutGrace is abandoned: its goroutine is left behind, counted by
// Abandoned until it returns, and what it returns is dropped;
// the attempt then fails for good (no retry).
func (c *Engine) attempt(ctx context.Context, r *lease.Run, j *job, timeout time.Duration) (bson.RawValue, error) {
	result, err, gaveUp := attempt.Call(ctx, timeout, c.abandonOf(r), func(actx context.Context) (bson.RawValue, error) {
		return j.call(actx)
	})
	if gaveUp {
		return result, SkipRetry(err)
	}
	return result, err
}

// abandonOf is how an attempt of run r gives up on its handler.
func (c *Engine) abandonOf(r *lease.Run) *attempt.Abandon {
	return &attempt.Abandon{
		Grace: c.cfg.TimeoutGrace, Timeout: ErrTimeout, Count: &c.abandoned,
		Abandoned: func(err error) {
			c.log.Error("handler ignores its context; abandoned, its goroutine is left running", "key", r.Key, "run_id", r.RunID, "error", err)
			c.emit(Event{Kind: EventAbandoned, Key: r.Key, RunID: r.RunID, Err: err})
		},
		ReturnedLate: func() {
			c.log.Warn("abandoned handler returned at last; its result is dropped", "key", r.Key, "run_id", r.RunID)
		},
	}
}

// Abandoned is the number of handler goroutines given up on and still
// running (mscheduler.Consumer.Abandoned).
func (c *Engine) Abandoned() int { return int(c.abandoned.Load()) }
