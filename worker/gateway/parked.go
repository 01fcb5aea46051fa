package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// States of a parked run.
const (
	parkedWaiting   = iota // claimed, waiting for a taker
	parkedTaken            // with an executor
	parkedAbandoned        // nobody took it in time: released
	parkedDone             // its outcome is in, or it ended under its executor
)

// parked is a claimed run whose handler waits on executors: for a taker,
// then for the taker's renewals and outcome.
type parked struct {
	pool       *pool
	key, runID string
	attempt    int
	maxRetries int
	params     bson.RawValue
	headers    map[string]string
	lease      time.Duration // the task's worker timeout: the executor's renewal bound
	renewEvery time.Duration // the task's ping interval
	planned    time.Time     // the occurrence's planned time, for a task with a plan; zero otherwise

	takenCh chan struct{}  // closed when handed to an executor
	stopCh  chan struct{}  // closed when the gateway stops
	renewed chan struct{}  // buffered 1: the executor renewed
	outcome chan runResult // buffered 1: the executor's outcome

	mu         sync.Mutex // guards what follows
	state      int
	executor   string
	session    string
	deliveries int
	ended      error // why the run ended under its executor, for its later calls
	noRetry    bool  // its outcome is a failure not to be retried
}

// runResult is an executor's outcome: a result, or an error for the
// consumer (a retried failure, a final one, or a release).
type runResult struct {
	result bson.RawValue
	err    error
	final  bool // err is not to be retried (SkipRetry)
}

func newParked(p *pool, task *mscheduler.Task[bson.RawValue]) *parked {
	return &parked{
		pool: p, key: task.Key, runID: task.Run.ID, attempt: task.Run.Attempt, maxRetries: task.MaxRetries,
		params: task.Params, headers: task.Headers, lease: task.WorkerTimeout, renewEvery: task.PingInterval, planned: task.Run.PlannedAt,
		takenCh: make(chan struct{}), stopCh: p.g.stopCh, renewed: make(chan struct{}, 1), outcome: make(chan runResult, 1),
	}
}

// hand gives a waiting run to an executor; false if it is no longer
// waiting (its hold passed).
func (r *parked) hand(executor, session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedWaiting {
		return false
	}
	r.state, r.executor, r.session, r.deliveries = parkedTaken, executor, session, 1
	close(r.takenCh)
	return true
}

// redeliver gives a run back to its executor, restarted with a new
// session; the executor's lease starts afresh.
func (r *parked) redeliver(executor, session string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedTaken || r.executor != executor || r.session == session {
		return false
	}
	r.session = session
	r.deliveries++
	r.signalRenewed()
	return true
}

func (r *parked) executorID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.executor
}

func (r *parked) signalRenewed() {
	select {
	case r.renewed <- struct{}{}:
	default:
	}
}

// awaitTaker waits for an executor to take the run. A run nobody takes
// within hold is released, so that it does not sit claimed with no one on
// it.
func (r *parked) awaitTaker(ctx context.Context, hold time.Duration) error {
	timer := time.NewTimer(hold)
	defer timer.Stop()
	select {
	case <-r.takenCh:
		return nil
	case <-timer.C:
		if r.abandon() {
			return fmt.Errorf("no executor took the run within %s: %w", hold, mscheduler.ErrRelease)
		}
	case <-ctx.Done():
		if r.abandon() {
			return context.Cause(ctx)
		}
	case <-r.stopCh:
		if r.abandon() {
			return errStopping
		}
	}
	return nil // taken as the wait ended
}

func (r *parked) abandon() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedWaiting {
		return false
	}
	r.state = parkedAbandoned
	return true
}

// awaitOutcome waits for the executor's outcome, for as long as it renews
// the run within its lease and the consumer keeps it.
func (r *parked) awaitOutcome(ctx context.Context) (bson.RawValue, error) {
	timer := time.NewTimer(r.lease)
	defer timer.Stop()
	for {
		select {
		case o := <-r.outcome:
			return o.result, o.err
		case <-r.renewed:
			timer.Reset(r.lease)
		case <-timer.C:
			err := fmt.Errorf("executor %q did not renew the run within its lease (%s)", r.executorID(), r.lease)
			if r.end(err) {
				return bson.RawValue{}, err
			}
		case <-ctx.Done():
			if r.end(context.Cause(ctx)) {
				return bson.RawValue{}, context.Cause(ctx)
			}
		case <-r.stopCh:
			if r.end(errStopping) {
				return bson.RawValue{}, errStopping
			}
			r.stopCh = nil // its outcome is in: take it
		}
	}
}

// end marks the run ended under its executor; false if its outcome came
// in first (it is then waiting in r.outcome).
func (r *parked) end(why error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedTaken {
		return false
	}
	r.state, r.ended = parkedDone, why
	return true
}

// gone is the answer to an executor's call on a run that ended.
func (r *parked) gone() *apiError {
	msg := "the run's outcome is in already"
	if r.ended != nil {
		msg = "the run ended: " + r.ended.Error()
	}
	return &apiError{409, "run_id", msg, nil}
}

// renew extends the executor's hold on the run by its lease.
func (r *parked) renew() *apiError {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedTaken {
		return r.gone()
	}
	r.signalRenewed()
	return nil
}

// finish hands the executor's outcome to the handler, once.
func (r *parked) finish(o runResult) *apiError {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != parkedTaken {
		return r.gone()
	}
	r.state, r.noRetry = parkedDone, o.final
	r.outcome <- o
	return nil
}

// final says the executor's outcome was a failure not to be retried.
func (r *parked) final() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.noRetry
}

// retries says a failure to be retried would be: the task's local
// retries are not used up.
func (r *parked) retries() bool { return r.attempt <= max(r.maxRetries, 0) }

// errStopping releases the runs of a gateway that stops: their executors'
// outcomes could not be written after it.
var errStopping = fmt.Errorf("the gateway stopped: %w", mscheduler.ErrRelease)
