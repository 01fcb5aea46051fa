package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"
)

// startRun starts the goroutine that executes a claimed run. The claim loop
// has already taken the run's slot; the goroutine gives it back.
func (c *Consumer[P, R]) startRun(doc *taskDoc) {
	h := doc.Holders[c.cfg.WorkerID]
	ctx, cancel := context.WithCancelCause(c.workCtx)
	r := &activeRun{
		key:           doc.Key,
		runID:         h.Run,
		started:       h.Started,
		cancel:        cancel,
		soleHolder:    doc.Running == 1,
		pingInterval:  fromMS(doc.PingIntervalMS),
		workerTimeout: fromMS(doc.WorkerTimeoutMS),
		doc:           doc,
	}
	if r.pingInterval <= 0 || r.workerTimeout <= r.pingInterval {
		r.pingInterval, r.workerTimeout = PingIntervalDefault, WorkerTimeoutDefault
	}
	r.leaseUntil.Store(h.LeaseUntil.UnixNano())
	c.emit(Event{Kind: EventClaimed, Key: r.key, RunID: r.runID, Planned: ptrTime(doc.planned())})
	c.log.Debug("claimed", "key", r.key, "run_id", r.runID)
	c.pinger.add(r)
	go func() {
		defer c.slots.Release(1)
		defer c.wake()
		defer cancel(nil)
		c.execute(ctx, r, doc)
	}()
}

// execute runs the handler with local retries and writes the run's end.
func (c *Consumer[P, R]) execute(ctx context.Context, r *activeRun, doc *taskDoc) {
	task, err := decodeTask[P](doc, r)
	var result R
	attempts := 0
	if err != nil {
		err = SkipRetry(err)
	} else {
		result, err, attempts = c.callWithRetries(ctx, r, task, doc)
	}
	c.pinger.remove(r)
	if r.lost.Load() {
		c.emit(Event{Kind: EventLeaseLost, Key: r.key, RunID: r.runID, Attempt: attempts, Err: context.Cause(ctx)})
		return
	}
	if !r.finished.CompareAndSwap(false, true) {
		return // Stop released the run after giving up on its handler
	}
	end := c.newRunEnd(r, attempts)
	switch {
	case err == nil:
		end.record.Outcome = OutcomeSucceeded
		if end.record.Result, err = encodeValue(result); err != nil {
			end.record.Outcome = OutcomeFailed
			end.record.Error = fmt.Sprintf("result cannot be encoded as BSON: %v", err)
		}
	case errors.Is(context.Cause(ctx), ErrShutdown):
		end.record.Outcome = OutcomeReleased
		end.record.Error = err.Error()
	case errors.Is(context.Cause(ctx), ErrRevoked):
		end.record.Outcome = OutcomeRevoked
		end.record.Error = ErrRevoked.Error()
	default:
		end.record.Outcome = OutcomeFailed
		end.record.Error = err.Error()
	}
	c.writeEnd(r, end)
}

func (c *Consumer[P, R]) newRunEnd(r *activeRun, attempts int) *runEnd {
	now, doc := c.clock.Now(), r.doc
	return &runEnd{
		key:      r.key,
		workerID: c.cfg.WorkerID,
		fence:    fence(r.key, c.cfg.WorkerID, r.runID),
		record: runRecord{
			RunID: r.runID, WorkerID: c.cfg.WorkerID, Started: r.started,
			LeaseUntil: r.lease(), Finished: now, Attempts: attempts, Planned: doc.planned(),
		},
		distinct:      doc.DistinctWorkers,
		maxFailedRuns: doc.MaxFailedRuns,
		retryAt:       now.Add(backoff(fromMS(doc.RetryDelayMS), doc.FailedRuns+1)),
		now:           now,
		runsKept:      c.cfg.RunsKept,
		seen:          taskState{Status: doc.Status, Running: doc.Running, Free: doc.Free, FailedRuns: doc.FailedRuns},
		advance:       newPlanAdvance(doc, r.started, now),
	}
}

func (c *Consumer[P, R]) writeEnd(r *activeRun, end *runEnd) {
	ctx, cancel := c.writeCtx()
	defer cancel()
	err := end.write(ctx, c.coll)
	ev := Event{Key: r.key, RunID: r.runID, Attempt: end.record.Attempts, Planned: ptrTime(end.record.Planned)}
	switch {
	case errors.Is(err, errRunGone):
		ev.Kind, ev.Err = EventLeaseLost, ErrLeaseLost
		c.log.Warn("run was taken over before its end was written; result dropped", "key", r.key, "run_id", r.runID)
	case err != nil:
		// The lease will lapse and another worker will record the run as
		// expired and take its slot: at-least-once, never lost.
		ev.Kind, ev.Err = EventError, err
		c.log.Error("could not write run end", "key", r.key, "run_id", r.runID, "error", err)
	default:
		ev.Kind = map[Outcome]EventKind{
			OutcomeSucceeded: EventSucceeded, OutcomeFailed: EventFailed, OutcomeReleased: EventReleased, OutcomeRevoked: EventRevoked,
		}[end.record.Outcome]
		if end.record.Error != "" {
			ev.Err = errors.New(end.record.Error)
		}
		c.log.Info("run "+string(end.record.Outcome), "key", r.key, "run_id", r.runID, "attempts", end.record.Attempts)
	}
	c.emit(ev)
}

// callWithRetries calls the handler until it succeeds, its error is final,
// its local retries are spent, or its context ends.
func (c *Consumer[P, R]) callWithRetries(ctx context.Context, r *activeRun, task *Task[P], doc *taskDoc) (R, error, int) {
	retries := max(doc.MaxRetries, 0)
	for attempt := 1; ; attempt++ {
		task.Run.Attempt = attempt
		result, err := c.attempt(ctx, r, task, c.timeout(doc))
		if err == nil || ctx.Err() != nil || isSkipRetry(err) || attempt > retries {
			return result, err, attempt
		}
		c.emit(Event{Kind: EventRetried, Key: r.key, RunID: r.runID, Attempt: attempt, Err: err})
		c.log.Info("handler failed; retrying locally", "key", r.key, "run_id", r.runID, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return result, err, attempt
		case <-time.After(backoff(fromMS(doc.RetryDelayMS), attempt)):
		}
	}
}

// call runs the handler once, turning a panic into a *PanicError.
func (c *Consumer[P, R]) call(ctx context.Context, task *Task[P]) (result R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return c.handler(ctx, task)
}

// backoff is the delay before local retry n (from 1): base doubled n-1
// times, capped at RetryDelayMax, with ±20% jitter.
func backoff(base time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n && d < RetryDelayMax; i++ {
		d *= 2
	}
	d = min(d, RetryDelayMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// decodeTask builds the handler's view of a claimed task. A document whose
// params do not decode into P fails its run at once, with the field named.
func decodeTask[P any](doc *taskDoc, r *activeRun) (*Task[P], error) {
	t := &Task[P]{
		Key:             doc.Key,
		Priority:        doc.Priority,
		RunAt:           doc.RunAt,
		Concurrency:     doc.Concurrency,
		DistinctWorkers: doc.DistinctWorkers,
		WorkerIDs:       doc.WorkerIDs,
		Group:           doc.Group,
		PingInterval:    fromMS(doc.PingIntervalMS),
		WorkerTimeout:   fromMS(doc.WorkerTimeoutMS),
		MaxRetries:      doc.MaxRetries,
		RetryDelay:      fromMS(doc.RetryDelayMS),
		MaxFailedRuns:   doc.MaxFailedRuns,
		Timeout:         fromMS(doc.TimeoutMS),
		Description:     doc.Description,
		Source:          doc.Source,
		Tags:            doc.Tags,
		Run: &Run{
			ID: r.runID, WorkerID: doc.holderWorker(r.runID), StartedAt: r.started, PlannedAt: ptrTime(doc.planned()),
			Status: doc.Status, Succeeded: doc.Succeeded, FailedRuns: doc.FailedRuns,
		},
	}
	if doc.corrupt != nil {
		return nil, doc.corrupt
	}
	if err := doc.validate(); err != nil {
		return nil, err
	}
	if doc.Plan != nil {
		p, err := doc.Plan.plan()
		if err == nil {
			_, err = doc.Plan.schedule()
		}
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", doc.Key, err)
		}
		t.Plan = &p
	}
	if err := doc.Params.Unmarshal(&t.Params); err != nil {
		return nil, fmt.Errorf("task %q: field %s cannot be decoded into %T: %w", doc.Key, fParams, t.Params, err)
	}
	return t, nil
}

// validate checks the options of a stored task, which a hand edit may have
// broken; a broken task fails its run at once with the field named.
func (d *taskDoc) validate() error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("task %q: field %s %s", d.Key, field, fmt.Sprintf(format, args...))
	}
	switch {
	case d.Concurrency < 1:
		return bad(fConcurrency, "must be at least 1, got %d", d.Concurrency)
	case d.PingIntervalMS <= 0:
		return bad(fPingIntervalMS, "must be positive, got %d", d.PingIntervalMS)
	case d.WorkerTimeoutMS <= d.PingIntervalMS:
		return bad(fWorkerTimeoutMS, "must be greater than %s (%d), got %d", fPingIntervalMS, d.PingIntervalMS, d.WorkerTimeoutMS)
	case d.MaxFailedRuns < 1:
		return bad(fMaxFailedRuns, "must be at least 1, got %d", d.MaxFailedRuns)
	case d.MaxRetries < NoRetries:
		return bad(fMaxRetries, "must be -1 or more, got %d", d.MaxRetries)
	}
	return nil
}

func (d *taskDoc) holderWorker(runID string) string {
	for w, h := range d.Holders {
		if h.Run == runID {
			return w
		}
	}
	return ""
}

// releaseAbandoned releases the runs whose handlers ignored their cancelled
// context past ReleaseTimeout. Their goroutines are left behind; whatever
// they return later is not written.
func (c *Consumer[P, R]) releaseAbandoned() {
	for _, r := range c.pinger.snapshot() {
		if !r.finished.CompareAndSwap(false, true) {
			continue
		}
		c.pinger.remove(r)
		c.log.Error("handler ignored cancellation; run released and goroutine abandoned", "key", r.key, "run_id", r.runID)
		end := c.newRunEnd(r, 0)
		end.record.Outcome = OutcomeReleased
		end.record.Error = fmt.Sprintf("handler did not return within %s of shutdown; abandoned", c.cfg.ReleaseTimeout)
		c.writeEnd(r, end)
	}
}

// planned is the planned time of the task's current occurrence, nil for a
// task without a plan.
func (d *taskDoc) planned() *time.Time {
	if d.Plan == nil {
		return nil
	}
	t := d.Plan.Planned
	return &t
}

func ptrTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// timeout is the deadline of each handler attempt of the task.
func (c *Consumer[P, R]) timeout(doc *taskDoc) time.Duration {
	if doc.TimeoutMS > 0 {
		return fromMS(doc.TimeoutMS)
	}
	return c.cfg.Timeout
}
