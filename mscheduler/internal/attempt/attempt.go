// Package attempt calls a handler once under its task's deadline, and
// gives up on a handler that outlives its cancelled context: its goroutine
// is left behind and counted until it returns, and what it returns then is
// dropped.
package attempt

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// TimeoutError is the cause of an attempt's context cancelled at its
// deadline. It matches Target (the public timeout error) with errors.Is.
type TimeoutError struct {
	After  time.Duration
	Target error
}

func (e *TimeoutError) Error() string        { return fmt.Sprintf("handler timed out after %s", e.After) }
func (e *TimeoutError) Is(target error) bool { return target == e.Target }

// Abandon is how a consumer gives up on handlers and hears of it. Its
// fields are set once; its callbacks must not block.
type Abandon struct {
	// Grace is how long a handler may outlive its cancelled context.
	Grace time.Duration
	// Timeout is TimeoutError's Target.
	Timeout error
	// Count is the handlers given up on that have not returned yet.
	Count *atomic.Int64
	// Abandoned hears of a handler given up on, with the attempt's error.
	Abandoned func(err error)
	// ReturnedLate hears that a handler given up on returned at last.
	ReturnedLate func()
}

// state says who finished an attempt first: the handler returning, or the
// attempt giving up on it.
const (
	running int32 = iota
	returned
	abandoned
)

// Call calls call once with timeout on its context. An attempt still going
// at the deadline fails with a TimeoutError even if the handler returns
// success later. gaveUp says the handler outlived its cancelled context by
// a.Grace (the attempt's own deadline passing, or ctx ending) and was
// abandoned; err then says so, and the attempt must not be retried.
func Call[R any](ctx context.Context, timeout time.Duration, a *Abandon, call func(context.Context) (R, error)) (result R, err error, gaveUp bool) {
	actx, cancel := context.WithTimeoutCause(ctx, timeout, &TimeoutError{After: timeout, Target: a.Timeout})
	defer cancel()
	type outcome struct {
		result R
		err    error
	}
	done := make(chan outcome, 1)
	var state atomic.Int32
	go func() {
		result, err := call(actx)
		done <- outcome{result, err}
		if !state.CompareAndSwap(running, returned) {
			a.Count.Add(-1)
			a.ReturnedLate()
		}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-actx.Done():
		grace := time.NewTimer(a.Grace)
		defer grace.Stop()
		select {
		case o = <-done:
		case <-grace.C:
			if state.CompareAndSwap(running, abandoned) {
				a.Count.Add(1)
				err := fmt.Errorf("%w; it ignored its context for %s and was abandoned", context.Cause(actx), a.Grace)
				a.Abandoned(err)
				var zero R
				return zero, err, true
			}
			o = <-done // it returned just now
		}
	}
	if ctx.Err() == nil && actx.Err() != nil { // the deadline passed, not the caller's cancellation
		var zero R
		return zero, context.Cause(actx), false
	}
	return o.result, o.err, false
}
