package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// claimLease is the lease a claim stores (see taskstate.ClaimLease).
const claimLease = taskstate.ClaimLease

// skipFor is how long the claim loop skips a task that it could neither
// claim nor set invalid (both writes refused): long enough not to spin on
// it, short enough that a repaired task is served again soon.
const skipFor = time.Minute

// maxSkipped bounds the tasks skipped at once; the oldest make way.
const maxSkipped = 100

// claimSlots claims up to k runs: alone with one findAndModify, or as a
// batch. done says nothing else is claimable now. The first claim is a
// batch whatever k: its candidates tell the worker timeouts of the tasks,
// which a findAndModify's next_expiry would have to guess (see
// leaseHint), and with nothing to claim it costs one command.
func (c *Engine) claimSlots(ctx context.Context, st *claimState, k int) (won []claimed, done bool, err error) {
	if c.claimsByKey(st, k) {
		return c.claimOneByKey(ctx, st)
	}
	if k > 1 || c.cfg.TargetedClaims || c.sparesServe(st, k) || !st.leases.seenAny() {
		return c.claimBatch(ctx, st, k)
	}
	raw, runID, err := c.claimOne(ctx, st)
	if err != nil || raw == nil {
		return nil, err == nil, err
	}
	return []claimed{{raw: raw, runID: runID}}, false, nil
}

// admit starts a claimed run, unless the task cannot run as stored (it is
// set invalid instead) or its plan gives the slot back. It reports whether
// the run started.
func (c *Engine) admit(raw bson.Raw, runID string, st *claimState) bool {
	doc, run, call, prob := c.decodeClaimed(raw)
	if prob != nil {
		c.quarantineClaimed(raw, runID, prob)
		return false
	}
	st.leases.observe(stored.FromMS(doc.WorkerTimeoutMS))
	c.limiter.KeepWithin(stored.FromMS(doc.WorkerTimeoutMS))
	if !c.planGate(doc) {
		return false
	}
	run.PlannedAt = stored.TimeOf(doc.Planned()) // the plan gate may have moved it
	c.startRun(doc, &job{run: run, call: call}, st.claimLatency)
	return true
}

// quarantineClaimed sets a claimed task that cannot run as stored to
// stored.StatusInvalid, ending this worker's claim in the same write.
func (c *Engine) quarantineClaimed(raw bson.Raw, runID string, prob *stored.Problem) {
	ctx, cancel := c.writeCtx()
	defer cancel()
	q := upkeep.NewQuarantine(raw, prob, taskstate.FoundAtClaim).Ending(c.cfg.WorkerID, runID, nil, time.Time{})
	if _, err := c.upkeep.Quarantine(ctx, q); err != nil {
		// The claim's lease lapses and a sweep ends it; the next claim of
		// the task tries again.
		c.loopError(ctx, err)
	}
}

// claimOne claims one slot of the best claimable task with one
// findOneAndUpdate, returning the task as claimed and the run's id, or nil
// if there is none.
func (c *Engine) claimOne(ctx context.Context, st *claimState) (bson.Raw, string, error) {
	now := c.clock.Now()
	filter := c.claimant(st, now).Due(now)
	runID := newRunID()
	st.stretch.need, st.stretch.to = c.limiter.Stretch()
	update := c.claimUpdate(st, runID, now, 0)
	opts := options.FindOneAndUpdate().SetSort(taskstate.ClaimSort).SetReturnDocument(options.After)
	// A claim the server applied must reach its run, so a stop does not
	// interrupt the command (the loop checks ctx before each claim): a claim
	// lost on the way back would hold its slot until the lease lapsed.
	wctx, cancel := c.claimCtx(st.runLease(0))
	defer cancel()
	raw, err := c.sendClaim(wctx, st, filter, update, opts)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, "", nil
	case err != nil && isServerRefusal(err):
		return c.claimPastRefusal(wctx, st)
	case err != nil:
		if found := c.claimReplyLost(wctx, st, runID); found != nil {
			return found, runID, nil
		}
		return nil, "", fmt.Errorf("mscheduler: claim: %w", err)
	}
	c.tightenExpiry(wctx, raw, runID)
	return raw, runID, nil
}

// sendClaim sends a claim's findAndModify, returning the task as claimed,
// and times it: the round trip weighs the next claims' leases.
func (c *Engine) sendClaim(ctx context.Context, st *claimState, filter, update bson.D, opts *options.FindOneAndUpdateOptionsBuilder) (bson.Raw, error) {
	sent := time.Now()
	raw, err := c.caps.FindOneAndUpdate(ctx, c.coll, filter, update, opts, bson.D{{Key: stored.FRuns, Value: 0}}).Raw()
	st.claimLatency = time.Since(sent)
	if err == nil || errors.Is(err, mongo.ErrNoDocuments) {
		c.commandTook(st.claimLatency)
	}
	return raw, err
}

// claimReplyLost looks for the task a claim of run runID was applied to,
// after the claim failed on the way: the server may have applied it and
// lost the reply (a server without retryable writes does not resend it).
// A look that fails is made again at the next pass.
func (c *Engine) claimReplyLost(ctx context.Context, st *claimState, runID string) bson.Raw {
	found, err := c.findClaim(ctx, runID)
	if err != nil {
		st.unconfirmed = appendBounded(st.unconfirmed, runID)
	}
	return found
}

// tightenExpiry lowers the next_expiry of a task claimed without being
// read first to when the new run's lease lapses by the task's own worker
// timeout, when the claim's guess (from other tasks) was later: a sweep
// must look at the run as soon as its lease may lapse, even if this
// worker dies before the run's first ping. A write that fails leaves the
// guess, which the first ping corrects.
func (c *Engine) tightenExpiry(ctx context.Context, raw bson.Raw, runID string) {
	timeout, _ := raw.Lookup(stored.FWorkerTimeoutMS).AsInt64OK()
	started, okStart := raw.Lookup(stored.FHolders, c.cfg.WorkerID, stored.HStarted).DateTimeOK()
	guess, okGuess := raw.Lookup(stored.FNextExpiry).DateTimeOK()
	if timeout <= 0 || !okStart || !okGuess {
		return
	}
	leaseMS, _ := raw.Lookup(stored.FHolders, c.cfg.WorkerID, stored.HLeaseMS).AsInt64OK()
	lease := taskstate.RunLease(stored.Holder{LeaseMS: leaseMS}, stored.FromMS(timeout))
	due := time.UnixMilli(started).Add(lease)
	if !due.Before(time.UnixMilli(guess)) {
		return
	}
	filter, update := taskstate.LowerExpiry(raw.Lookup(stored.FID), c.cfg.WorkerID, runID, due)
	if _, err := c.coll.UpdateOne(ctx, filter, update); err != nil {
		c.log.Debug("could not lower a claimed task's next_expiry to its own worker timeout; its first ping will", "key", raw.Lookup(stored.FKey).String(), "error", err)
	}
}

// claimPastRefusal claims one slot after a claim of whichever task came
// first was refused: the candidates are read and claimed one at a time, by
// key, until one is won, so that a refusal names its task. Looking the
// refused task up again with the claim's own filter named the wrong one
// when the task at fault had left the claimable ones meanwhile (another
// worker set it invalid), and a sound task was set invalid for it.
func (c *Engine) claimPastRefusal(ctx context.Context, st *claimState) (bson.Raw, string, error) {
	now := c.clock.Now()
	cands, err := c.candidates(ctx, c.claimant(st, now).Due(now), refusalCandidates)
	if err != nil {
		return nil, "", err
	}
	for _, cd := range cands {
		won, err := c.claimAlone(st, cd)
		if err != nil {
			return nil, "", err
		}
		if len(won) > 0 {
			return won[0].raw, won[0].runID, nil
		}
	}
	return nil, "", nil
}

// refusalCandidates is how many candidates a claim past a refusal reads.
const refusalCandidates = 8

// maxUnconfirmed bounds the lost claims looked for at once: a lost batch
// claim leaves one per statement.
const maxUnconfirmed = 4 * 64 // four claims of ClaimBatchMaxDefault

// findClaim looks for the task a claim with runID was applied to. Only
// running tasks can hold it, which the claim index serves.
func (c *Engine) findClaim(ctx context.Context, runID string) (bson.Raw, error) {
	raw, err := c.coll.FindOne(ctx, bson.D{{Key: stored.FStatus, Value: stored.StatusRunning}, {Key: stored.HolderPath(c.cfg.WorkerID, stored.HRun), Value: runID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	return raw, err
}

// confirmLostClaims looks again, in one query, for claims whose reply was
// lost and whose first look failed too. One found is released (not run:
// its lease may be short of lapsing), so that it counts as no failure.
func (c *Engine) confirmLostClaims(ctx context.Context, st *claimState) {
	if len(st.unconfirmed) == 0 {
		return
	}
	filter := bson.D{{Key: stored.FStatus, Value: stored.StatusRunning}, {Key: stored.HolderPath(c.cfg.WorkerID, stored.HRun), Value: taskstate.Op("$in", st.unconfirmed)}}
	found, err := query.FindAll(ctx, c.coll, filter, nil, bson.D{{Key: stored.FRuns, Value: 0}}, len(st.unconfirmed))
	if err != nil {
		return // looked for again at the next pass
	}
	st.unconfirmed = st.unconfirmed[:0]
	for _, raw := range found {
		runID, _ := raw.Lookup(stored.FHolders, c.cfg.WorkerID, stored.HRun).StringValueOK()
		c.releaseLostClaim(raw, runID)
	}
}

func (c *Engine) releaseLostClaim(raw bson.Raw, runID string) {
	doc, _, _, prob := c.decodeClaimed(raw)
	if prob != nil {
		c.quarantineClaimed(raw, runID, prob)
		return
	}
	h := doc.Holders[c.cfg.WorkerID]
	r := &lease.Run{Key: doc.Key, ID: doc.RawID, RunID: runID, Started: h.Started, Doc: doc}
	r.SetLease(h.LeaseUntil)
	r.Finished.Store(true)
	end := c.newRunEnd(r, 0)
	end.Record.Outcome = stored.OutcomeReleased
	end.Record.Error = "the claim's reply was lost; released without running"
	c.writeEnd(r, end)
}

// decodeClaimed reads a claimed task, and prepares its handler's call. A
// task that cannot run as stored (a field of the wrong type, a missing
// one, params the handler cannot take, a broken plan) returns the problem,
// naming the field.
func (c *Engine) decodeClaimed(raw bson.Raw) (*stored.Task, *Run, CallFunc, *stored.Problem) {
	workerID := c.cfg.WorkerID
	doc, p := c.cfg.Documents.Inspect(raw)
	if p != nil {
		return nil, nil, nil, p
	}
	h, ok := doc.Holders[workerID]
	if !ok {
		return nil, nil, nil, &stored.Problem{Field: stored.HolderPath(workerID), Reason: "is missing right after the claim"}
	}
	run := &Run{
		ID: h.Run, WorkerID: workerID, StartedAt: h.Started, PlannedAt: stored.TimeOf(doc.Planned()),
		Status: doc.Status, Succeeded: doc.Succeeded, FailedRuns: doc.FailedRuns,
	}
	call, err := c.cfg.Prepare(doc, run)
	if err != nil {
		return nil, nil, nil, &stored.Problem{Field: stored.FParams, Reason: err.Error()}
	}
	return doc, run, call, nil
}

// isServerRefusal reports an error where the server refused the command on
// its merits (as opposed to the network or a timeout), so retrying the same
// command would fail again.
func isServerRefusal(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err)
}

// refused handles a claim the server refused: the task it was aimed at is
// set to stored.StatusInvalid with the reason, so that every worker skips it from
// then on. If even that write is refused, this worker skips the task for
// a while.
func (c *Engine) refused(ctx context.Context, st *claimState, filter bson.D, cause error) {
	st.spares.Drop() // they may hold the task, to be set invalid or skipped
	raw, err := c.coll.FindOne(ctx, filter, options.FindOne().SetSort(taskstate.ClaimSort)).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		// No longer claimable: the check (in the upkeep loop, beside this
		// one) or another worker set it invalid meanwhile, or it changed.
		return
	case err != nil:
		c.loopError(ctx, fmt.Errorf("mscheduler: claim refused (%v), and the task could not be identified: %w", cause, err))
		return
	}
	key := stored.IDString(raw.Lookup(stored.FID))
	prob := c.inspect(raw)
	if prob == nil {
		prob = &stored.Problem{Field: "(document)", Reason: "cannot be claimed: " + upkeep.ServerMessage(cause)}
	}
	if _, err := c.upkeep.Quarantine(ctx, upkeep.NewQuarantine(raw, prob, taskstate.FoundAtRefusal)); err != nil {
		st.skipped.add(key, c.clock.Now().Add(skipFor))
		c.log.Error("task cannot be claimed nor set invalid; skipping it for a while", "key", key, "error", err, "skip_for", skipFor)
		c.emit(Event{Kind: EventError, Key: key, Err: fmt.Errorf("mscheduler: task %q cannot be claimed (%v), skipped for %s: %w", key, prob, skipFor, err)})
	}
}

// scheduleNextDue remembers when the earliest not-yet-due eligible task
// becomes claimable, so the loop wakes then without polling. The
// database's shared poll tells that too, but only at its next poll: a
// pass that ends here, after a wake, knows it now.
func (c *Engine) scheduleNextDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	opts := options.FindOne().SetSort(bson.D{{Key: stored.FRunAt, Value: 1}}).SetProjection(bson.D{{Key: stored.FRunAt, Value: 1}})
	raw, err := c.coll.FindOne(ctx, c.claimant(st, now).Future(now), opts).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		c.loopError(ctx, fmt.Errorf("mscheduler: find next due task: %w", err))
	default:
		if at, ok := raw.Lookup(stored.FRunAt).TimeOK(); ok { // the filter holds dates only
			st.due.Add(at)
		}
	}
}

// claimant is this consumer as a claim's filters name it at now.
func (c *Engine) claimant(st *claimState, now time.Time) taskstate.Claimant {
	return taskstate.Claimant{WorkerID: c.cfg.WorkerID, Groups: c.cfg.Groups, Skipped: st.skipped.keys(now)}
}

// loopError reports a failed background operation. A stop in progress is
// not an error.
func (c *Engine) loopError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.Warn("background operation failed", "error", err)
	c.emit(Event{Kind: EventError, Err: err})
}

func newRunID() string { return uuid.NewString() }

// skipList holds the tasks this worker skips for a while; it is bounded
// and forgets each entry when it expires.
type skipList []skipped

type skipped struct {
	key   string
	until time.Time
}

func (l *skipList) add(key string, until time.Time) {
	if len(*l) >= maxSkipped {
		*l = (*l)[1:]
	}
	*l = append(*l, skipped{key, until})
}

// keys returns the keys still skipped at now, forgetting the others.
func (l *skipList) keys(now time.Time) []string {
	left := (*l)[:0]
	var out []string
	for _, s := range *l {
		if now.Before(s.until) {
			left = append(left, s)
			out = append(out, s.key)
		}
	}
	*l = left
	return out
}

// leaseHint guesses, for next_expiry, when a new run's lease may lapse: the
// shortest worker timeout among the tasks this worker claimed last (at most
// claimLease), so that with tasks alike a sweep looks at a dead worker's
// run as soon as its lease lapses, even before its first ping.
type leaseHint struct {
	seen [16]time.Duration
	next int
}

func (h *leaseHint) observe(timeout time.Duration) {
	h.seen[h.next%len(h.seen)] = timeout
	h.next++
}

// seenAny says a worker timeout was observed.
func (h *leaseHint) seenAny() bool { return h.next > 0 }

func (h *leaseHint) shortest() time.Duration {
	out := claimLease
	for _, d := range h.seen {
		if d > 0 {
			out = min(out, d)
		}
	}
	return out
}

func minTime(first time.Time, rest ...time.Time) time.Time {
	for _, t := range rest {
		if t.Before(first) {
			first = t
		}
	}
	return first
}
