package mscheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
)

// timeoutError is the cause of a handler context cancelled by the task's
// deadline; it matches [ErrTimeout].
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string        { return fmt.Sprintf("handler timed out after %s", e.after) }
func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// attemptState says who finished an attempt first: the handler returning,
// or the run giving up on it.
const (
	attemptRunning int32 = iota
	attemptReturned
	attemptAbandoned
)

// attempt calls the handler once, with the task's deadline on its context.
// An attempt still going at the deadline fails with a timeout error even if
// the handler returns success later. A handler that outlives its cancelled
// context by TimeoutGrace is abandoned: its goroutine is left behind,
// counted by [Consumer.Abandoned] until it returns, and what it returns is
// dropped; the attempt then fails for good (no retry).
func (c *engine) attempt(ctx context.Context, r *lease.Run, j *job, timeout time.Duration) (bson.RawValue, error) {
	actx, cancel := context.WithTimeoutCause(ctx, timeout, &timeoutError{after: timeout})
	defer cancel()
	type outcome struct {
		result bson.RawValue
		err    error
	}
	done := make(chan outcome, 1)
	var state atomic.Int32
	go func() {
		result, err := c.call(actx, j)
		done <- outcome{result, err}
		if !state.CompareAndSwap(attemptRunning, attemptReturned) {
			c.abandoned.Add(-1)
			c.log.Warn("abandoned handler returned at last; its result is dropped", "key", r.Key, "run_id", r.RunID)
		}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-actx.Done():
		grace := time.NewTimer(c.cfg.TimeoutGrace)
		defer grace.Stop()
		select {
		case o = <-done:
		case <-grace.C:
			if state.CompareAndSwap(attemptRunning, attemptAbandoned) {
				c.abandoned.Add(1)
				err := fmt.Errorf("%w; it ignored its context for %s and was abandoned", context.Cause(actx), c.cfg.TimeoutGrace)
				c.log.Error("handler ignores its context; abandoned, its goroutine is left running", "key", r.Key, "run_id", r.RunID, "error", err)
				c.emit(Event{Kind: EventAbandoned, Key: r.Key, RunID: r.RunID, Err: err})
				return bson.RawValue{}, SkipRetry(err)
			}
			o = <-done // it returned just now
		}
	}
	if ctx.Err() == nil && actx.Err() != nil { // the deadline passed, not the run's cancellation
		return bson.RawValue{}, context.Cause(actx)
	}
	return o.result, o.err
}

// Abandoned is the number of handler goroutines this consumer gave up on
// (they ignored their cancelled context) that have not returned yet: a
// count above zero is a leak to look into.
func (c *engine) Abandoned() int { return int(c.abandoned.Load()) }
