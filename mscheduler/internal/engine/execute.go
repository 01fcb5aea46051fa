package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// startRun announces a claimed run (EventClaimed) and hands it to the
// pinger; launchAdmitted then starts the goroutine that executes it, once
// every run of its claim is announced, so that a front end handing runs on
// (the HTTP gateway) knows of the whole claim before any of its handlers
// is called. The claim loop has already taken the run's slot; the
// goroutine gives it back once the run's end is written.
func (c *Engine) startRun(doc *stored.Task, j *job, claimLatency time.Duration) {
	ctx, cancel := context.WithCancelCause(c.workCtx)
	r := c.leasedRun(doc)
	r.Cancel = cancel
	if r.LeaseFloor > 0 {
		c.sayStretched(doc.Key, r.WorkerTimeout, r.LeaseFloor)
	}
	c.emit(Event{Kind: EventClaimed, Key: r.Key, RunID: r.RunID, Planned: stored.TimeOf(doc.Planned()), Latency: claimLatency})
	c.log.Debug("claimed", "key", r.Key, "run_id", r.RunID)
	renewFirst := r.Lease().Sub(c.clock.Now()) < claimLatency+pressure.Floor
	if !renewFirst {
		c.pinger.Add(r)
	}
	c.running.Add(1)
	c.admitted = append(c.admitted, admittedRun{run: r, renewFirst: renewFirst, execute: func() {
		defer c.running.Done()
		// The slot is free before the wake, so that the claim loop the wake
		// sets off finds it.
		defer c.slotFreedWake()
		defer c.releaseRunSlot(r)
		defer cancel(nil)
		c.execute(ctx, r, j)
	}})
}

// admittedRun is a run startRun announced, and its goroutine's work.
type admittedRun struct {
	run        *lease.Run
	renewFirst bool // handed to the pinger once renewed (see renewFirst)
	execute    func()
}

// launchAdmitted starts the goroutines of the runs startRun announced,
// and returns those runs.
func (c *Engine) launchAdmitted() []*lease.Run {
	runs := make([]*lease.Run, len(c.admitted))
	var renew []admittedRun
	for i, a := range c.admitted {
		runs[i] = a.run
		if a.renewFirst {
			renew = append(renew, a)
			continue
		}
		go a.execute()
	}
	if len(renew) > 0 {
		// The pinger looks at the runs it was given while these are
		// renewed: their first pings must not wait for it.
		c.pinger.Kick()
		c.renewFirst(renew)
		for _, a := range renew {
			go a.execute()
		}
	}
	clear(c.admitted)
	c.admitted = c.admitted[:0]
	return runs
}

// leasedRun is this worker's run of a claimed task, as the pinger keeps
// it leased: its lease the claim's, or shorter (see EffectiveLease).
func (c *Engine) leasedRun(doc *stored.Task) *lease.Run {
	h := doc.Holders[c.cfg.WorkerID]
	r := &lease.Run{
		Key:           doc.Key,
		ID:            doc.RawID,
		RunID:         h.Run,
		Started:       h.Started,
		SoleHolder:    doc.Running == 1,
		PingInterval:  stored.FromMS(doc.PingIntervalMS),
		WorkerTimeout: stored.FromMS(doc.WorkerTimeoutMS),
		Doc:           doc,
	}
	if lease := taskstate.RunLease(h, r.WorkerTimeout); lease > r.WorkerTimeout {
		r.LeaseFloor = lease
	}
	r.SetLease(taskstate.EffectiveLease(h, stored.FromMS(doc.WorkerTimeoutMS)))
	return r
}

// job is a claimed run as its goroutine executes it: the handler's call,
// and what the middleware sees of it.
type job struct {
	run  *Run // its Attempt moves with each attempt
	call CallFunc
}

// execute runs the handler with local retries and writes the run's end.
// The pinger keeps the run's lease until the end is written.
func (c *Engine) execute(ctx context.Context, r *lease.Run, j *job) {
	defer c.pinger.Remove(r)
	switch {
	case r.Lost.Load(): // taken over before it started (see renewFirst)
		c.emit(Event{Kind: EventLeaseLost, Key: r.Key, RunID: r.RunID, Err: context.Cause(ctx)})
		return
	case r.Finished.Load(): // released by Stop before it started
		return
	}
	result, err, attempts := c.callWithRetries(ctx, r, j, r.Doc)
	if r.Lost.Load() {
		c.emit(Event{Kind: EventLeaseLost, Key: r.Key, RunID: r.RunID, Attempt: attempts, Err: context.Cause(ctx)})
		return
	}
	if !r.Finished.CompareAndSwap(false, true) {
		return // Stop released the run after giving up on its handler
	}
	end := c.newRunEnd(r, attempts)
	switch {
	case err == nil:
		end.Record.Outcome = stored.OutcomeSucceeded
		end.Record.Result, err = c.encodeResult(result)
		if err != nil {
			end.Record.Outcome, end.Record.Result = stored.OutcomeFailed, bson.RawValue{}
			end.Record.Error = err.Error()
		}
	case errors.Is(context.Cause(ctx), ErrShutdown), ctx.Err() == nil && errors.Is(err, ErrRelease):
		end.Record.Outcome = stored.OutcomeReleased
		end.Record.Error = c.capError(err.Error())
	case errors.Is(context.Cause(ctx), ErrRevoked):
		end.Record.Outcome = stored.OutcomeRevoked
		end.Record.Error = ErrRevoked.Error()
	case errors.Is(context.Cause(ctx), ErrCancelled):
		end.Record.Outcome = stored.OutcomeCancelled
		end.Record.Error = ErrCancelled.Error()
	default:
		end.Record.Outcome = stored.OutcomeFailed
		end.Record.Error = c.capError(err.Error())
	}
	r.Ending = true
	c.ending.Add(1)
	c.writeEnd(r, end)
}

// slotFreedWake tells the claim loop that a run is over and its slot free:
// it claims, unless it leaves tasks of other shares for a moment (see
// passOver), when its next look is due anyway.
func (c *Engine) slotFreedWake() {
	select {
	case c.slotFreed <- struct{}{}:
	default:
	}
}

// releaseRunSlot frees the slot of a run that is over. A run that was
// ending stops counting as such only once its slot is free, so that a
// claim held back for ending runs finds their slots when none are left.
func (c *Engine) releaseRunSlot(r *lease.Run) {
	c.releaseSlots(1)
	if r.Ending {
		c.ending.Add(-1)
	}
}

// encodeResult checks a handler's result for its run record: within
// MaxResultBytes.
func (c *Engine) encodeResult(v bson.RawValue) (bson.RawValue, error) {
	if len(v.Value) > c.cfg.MaxResultBytes {
		return bson.RawValue{}, fmt.Errorf("result is %d bytes, over MaxResultBytes (%d): not stored, run failed", len(v.Value), c.cfg.MaxResultBytes)
	}
	return v, nil
}

// capError cuts an error text to MaxErrorBytes.
func (c *Engine) capError(text string) string { return cutText(text, c.cfg.MaxErrorBytes) }

// cutText cuts text to at most limit bytes, on a rune boundary, saying so.
func cutText(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	note := fmt.Sprintf("… (%d bytes, cut to MaxErrorBytes)", len(text))
	cut := max(limit-len(note), 0)
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + note
}

func (c *Engine) newRunEnd(r *lease.Run, attempts int) *runend.End {
	now, doc := c.clock.Now(), r.Doc
	return &runend.End{Key: r.Key, End: taskstate.End{
		ID:       r.ID,
		WorkerID: c.cfg.WorkerID,
		Fence:    taskstate.RunFence(r.ID, c.cfg.WorkerID, r.RunID),
		Record: stored.RunRecord{
			RunID: r.RunID, WorkerID: c.cfg.WorkerID, Started: r.Started,
			LeaseUntil: r.Lease(), Finished: now, Attempts: attempts, Planned: doc.Planned(),
			LeaseMS: r.LongestStretch().Milliseconds(),
		},
		Distinct:      doc.DistinctWorkers,
		MaxFailedRuns: doc.MaxFailedRuns,
		RetryAt:       now.Add(backoff(stored.FromMS(doc.RetryDelayMS), doc.FailedRuns+1)),
		Now:           now,
		RunsKept:      c.cfg.RunsKept,
		Retention:     c.cfg.Retention,
		Seen:          taskstate.Seen{Status: doc.Status, Running: doc.Running, Free: doc.Free, FailedRuns: doc.FailedRuns},
		Advance:       c.cfg.Documents.Advance(doc, r.Started, now),
	}}
}

// writeEnd writes a run's end while the pinger keeps its lease. A write the
// server refuses because of what the document holds is replaced by the
// minimal write that ends the run and sets the task invalid, naming the
// field. A write that fails otherwise (the network, a failover, a slow
// server) is tried again after a jittered backoff, drawn on the worker's
// retry budget, for as long as the run's lease is kept: no try is bounded
// by a fixed timeout that a slow server's round trip could exceed. Once
// the lease is gone, the run is left to lapse, and another worker records
// it as expired (at least once, never lost).
func (c *Engine) writeEnd(r *lease.Run, end *runend.End) {
	ctx, cancel := context.WithCancelCause(c.endCtx)
	defer cancel(nil)
	defer context.AfterFunc(r.Held(), func() { cancel(context.Cause(r.Held())) })()
	end.Held = r.Held()
	end.SendBy = time.Now().Add(r.Lease().Sub(c.clock.Now()) - c.pinger.Reserve())
	var err error
	sent := time.Now()
	var inBatch time.Duration // how long the batcher had the end, for a person asking why it came late
	for try := 1; ; try++ {
		err = runend.ErrWriteAlone
		if try == 1 && c.ends != nil {
			err = c.ends.Write(end)
			inBatch = time.Since(sent)
		}
		if errors.Is(err, runend.ErrWriteAlone) {
			err = end.Write(ctx, c.coll)
		}
		if err == nil {
			// Not a measure of the server's round trip (it waited for a
			// batch, and may be several commands), but a success.
			c.retries.Succeeded()
		}
		if err == nil || errors.Is(err, runend.ErrGone) || runend.Unwritable(err) || ctx.Err() != nil {
			break
		}
		pause := retry.Backoff(endRetryDelay, endRetryDelayMax, try)
		c.log.Warn("could not write run end; trying again while the lease is kept", "key", r.Key, "run_id", r.RunID, "try", try, "next_try_in", pause.Round(time.Millisecond), "error", err)
		if c.retries.Wait(ctx) != nil || retry.Sleep(ctx, pause) != nil {
			break
		}
	}
	ev := Event{Key: r.Key, RunID: r.RunID, Attempt: end.Record.Attempts, Planned: stored.TimeOf(end.Record.Planned),
		Duration: end.Record.Finished.Sub(end.Record.Started), Latency: time.Since(sent)}
	switch {
	case err == nil:
		c.history.Add(r.Key, end.Record)
		localwake.Ended(c.coll, r.Key)
		c.reportEnd(r, end, ev)
		return
	case errors.Is(err, runend.ErrGone):
		ev.Kind, ev.Err = EventLeaseLost, ErrLeaseLost
		// The lease left as the handler ended, and how long the write took,
		// tell a server too slow for the lease from a sweep that came early.
		c.log.Warn("run was taken over before its end was written; result dropped", "key", r.Key, "run_id", r.RunID,
			"lease_left_at_end", r.Lease().Sub(end.Record.Finished).Round(time.Millisecond), "write_took", time.Since(sent).Round(time.Millisecond),
			"in_batch", inBatch.Round(time.Millisecond))
	case runend.Unwritable(err):
		c.endUnwritable(r, end, err)
		return
	default:
		ev.Kind, ev.Err = EventError, err
		c.log.Error("could not write run end; its lease will lapse and another worker will record it as expired", "key", r.Key, "run_id", r.RunID, "error", err)
	}
	c.emit(ev)
}

// endRetryDelay is the first pause before a run end is tried again; the
// pauses double up to endRetryDelayMax.
const (
	endRetryDelay    = 100 * time.Millisecond
	endRetryDelayMax = 5 * time.Second
)

func (c *Engine) reportEnd(r *lease.Run, end *runend.End, ev Event) {
	ev.Kind = map[stored.Outcome]EventKind{
		stored.OutcomeSucceeded: EventSucceeded, stored.OutcomeFailed: EventFailed, stored.OutcomeReleased: EventReleased, stored.OutcomeRevoked: EventRevoked,
		stored.OutcomeCancelled: EventCancelled,
	}[end.Record.Outcome]
	if end.Record.Error != "" {
		ev.Err = errors.New(end.Record.Error)
	}
	// A success is the ordinary case, logged at Debug: at Info, a busy
	// worker's log would be little else. The other ends are news.
	switch end.Record.Outcome {
	case stored.OutcomeFailed:
		c.log.Warn("run failed", "key", r.Key, "run_id", r.RunID, "attempts", end.Record.Attempts, "error", end.Record.Error)
	case stored.OutcomeSucceeded:
		c.log.Debug("run succeeded", "key", r.Key, "run_id", r.RunID, "attempts", end.Record.Attempts)
	default:
		c.log.Info("run "+string(end.Record.Outcome), "key", r.Key, "run_id", r.RunID, "attempts", end.Record.Attempts)
	}
	c.emit(ev)
}

// endUnwritable ends a run whose end the server refused because of the
// stored document: the minimal fenced write removes the run's holder entry
// and sets the task invalid, keeping the run's record in the reason.
func (c *Engine) endUnwritable(r *lease.Run, end *runend.End, cause error) {
	ctx, cancel := retry.Bounded(c.endCtx, c.cfg.WriteTimeout, errWriteTimeout)
	defer cancel()
	raw, prob := c.upkeep.ProblemOf(ctx, end.Fence, cause)
	if raw == nil {
		c.emit(Event{Kind: EventLeaseLost, Key: r.Key, RunID: r.RunID, Err: ErrLeaseLost})
		return
	}
	rec := end.Record
	rec.Result = bson.RawValue{}
	rec.Error = cutText(rec.Error, 512) // the note must fit where the record did not
	q := upkeep.NewQuarantine(raw, prob, taskstate.FoundAtRunEnd).Ending(end.WorkerID, rec.RunID, &rec, time.Time{})
	ok, err := c.upkeep.Quarantine(ctx, q)
	if ok {
		c.history.Add(r.Key, rec) // the quarantine's report told the waiters
	}
	switch {
	case err != nil:
		c.log.Error("run end refused, and so was setting the task invalid; its lease will lapse", "key", r.Key, "run_id", r.RunID, "refused", cause, "error", err)
		c.emit(Event{Kind: EventError, Key: r.Key, RunID: r.RunID, Err: err})
	case !ok:
		c.emit(Event{Kind: EventLeaseLost, Key: r.Key, RunID: r.RunID, Err: ErrLeaseLost})
	}
}

// callWithRetries calls the handler until it succeeds, its error is final,
// its local retries are spent, or its context ends.
func (c *Engine) callWithRetries(ctx context.Context, r *lease.Run, j *job, doc *stored.Task) (bson.RawValue, error, int) {
	retries := max(doc.MaxRetries, 0)
	for attempt := 1; ; attempt++ {
		j.run.Attempt = attempt
		r.Attempt.Store(int32(attempt))
		result, err := c.attempt(ctx, r, j, c.timeout(doc))
		if err == nil || ctx.Err() != nil || isSkipRetry(err) || attempt > retries {
			return result, err, attempt
		}
		c.emit(Event{Kind: EventRetried, Key: r.Key, RunID: r.RunID, Attempt: attempt, Err: err})
		c.log.Info("handler failed; retrying locally", "key", r.Key, "run_id", r.RunID, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return result, err, attempt
		case <-time.After(backoff(stored.FromMS(doc.RetryDelayMS), attempt)):
		}
	}
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

// releaseAbandoned releases the runs whose handlers ignored their cancelled
// context past ReleaseTimeout. Their goroutines are left behind; whatever
// they return later is not written.
func (c *Engine) releaseAbandoned() {
	for _, r := range c.pinger.Snapshot() {
		if !r.Finished.CompareAndSwap(false, true) {
			continue
		}
		c.log.Error("handler ignored cancellation; run released and goroutine abandoned", "key", r.Key, "run_id", r.RunID)
		end := c.newRunEnd(r, 0)
		end.Record.Outcome = stored.OutcomeReleased
		end.Record.Error = fmt.Sprintf("handler did not return within %s of shutdown; abandoned", c.cfg.ReleaseTimeout)
		c.writeEnd(r, end)
		c.pinger.Remove(r)
	}
}

// timeout is the deadline of each handler attempt of the task.
func (c *Engine) timeout(doc *stored.Task) time.Duration {
	if doc.TimeoutMS > 0 {
		return stored.FromMS(doc.TimeoutMS)
	}
	return c.cfg.Timeout
}

// RetryDelayMax caps the exponential backoff between local retries
// (mscheduler.RetryDelayMax).
const RetryDelayMax = 5 * time.Minute

// firstPingNeeds is the lease a run must have left as its claim is
// answered for its first ping to land in time: the claim's round trip,
// twice over, and the floor of a slow server.
func firstPingNeeds(claimLatency time.Duration) time.Duration {
	return 2*claimLatency + pressure.Floor
}

// renewFirst renews, each with a ping of its own sent at once, before they
// run, the runs whose claim was answered with too little of their lease
// left for a first ping to land in time, one claim's round trip and a
// margin (a slow claim on a busy server, often a worker's first: it knows
// nothing yet of the server's round trips), or none. The pinger would have found
// them lapsed and cancelled them unrun, and each would have waited for a
// sweep and counted as a failed run. The renewal is fenced on the run, as
// every ping is: it lands only while no other worker can have taken the
// slot, whatever the lease says, since a sweep frees it first. A run it
// finds taken over is dropped unrun, and so is one whose renewal failed
// once its lease lapsed; one whose renewal failed with lease left goes to
// the pinger as it is.
func (c *Engine) renewFirst(admitted []admittedRun) {
	runs := make([]*lease.Run, len(admitted))
	lengths := make([]time.Duration, len(admitted))
	for i, a := range admitted {
		// The claim's lease, however fast pings came back of late: this
		// claim was answered slowly.
		runs[i], lengths[i] = a.run, max(a.run.WorkerTimeout, a.run.LeaseFloor)
	}
	ctx, cancel := c.writeCtx()
	defer cancel()
	held, errs := c.pinger.RenewEach(ctx, runs, c.clock.Now(), lengths)
	now := c.clock.Now()
	for i, r := range runs {
		switch {
		case held[i]:
			c.pinger.Add(r)
		case errs[i] == nil:
			c.dropUnrun(r, "taken over before it started: its claim was answered after its lease lapsed")
		case !now.Before(r.Lease()):
			c.dropUnrun(r, fmt.Sprintf("its lease lapsed before it started, and its renewal failed: %v", errs[i]))
		default:
			c.pinger.Add(r)
		}
	}
}

// dropUnrun gives up a claimed run before its handler is called: it is
// lost, and its goroutine ends at once (see execute).
func (c *Engine) dropUnrun(r *lease.Run, why string) {
	c.log.Warn("run dropped unrun", "key", r.Key, "run_id", r.RunID, "reason", why)
	r.Lost.Store(true)
	r.Cancel(fmt.Errorf("%w: %s", ErrLeaseLost, why))
}
