package taskstate

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// The operator's actions on one task. Each takes the task as read and
// returns its update, to be applied fenced on the task's rev as read (see
// RevFence), or the reason it does not apply to the task as it stands.

// runsAfter is what runsLeft a write that leaves the task's holders as
// read knows.
func runsAfter(t *stored.Task) runsLeft {
	if t.Running > 0 || len(t.Holders) > 0 {
		return someRunLeft
	}
	return noRunLeft
}

// Cancel ends the task: it runs no more, planned times included. Runs
// going on are cancelled by their workers and end as cancelled; the task
// is finished for good once the last of them has.
func Cancel(t *stored.Task, now time.Time, r Retention) (bson.D, string) {
	if t.Status.Final() {
		return nil, fmt.Sprintf("the task is already %s", t.Status)
	}
	var u update
	u.Set(stored.FStatus, stored.StatusCancelled)
	u.Set(stored.FUpdatedAt, now)
	u.Inc(stored.FRev, 1)
	u.settle(stored.StatusCancelled, runsAfter(t), now, r)
	return u.doc(), ""
}

// Retry makes a failed, cancelled or invalid task claimable now: its
// failed runs restart from 0, its successes and history are kept. A task
// with a plan goes on from its current planned time, which runs now.
func Retry(t *stored.Task, now time.Time, r Retention) (bson.D, string) {
	switch t.Status {
	case stored.StatusFailed, stored.StatusCancelled, stored.StatusInvalid:
	default:
		return nil, fmt.Sprintf("only a failed, cancelled or invalid task can be retried; this one is %s", t.Status)
	}
	free := t.Concurrency - t.Running - t.Succeeded
	if free <= 0 && t.Running == 0 {
		return nil, fmt.Sprintf("nothing is left to run: the task has as many successes as its concurrency (%d); publish it again with ResetFinished to run it again", t.Concurrency)
	}
	status := stored.StatusPending
	if t.Running > 0 {
		status = stored.StatusRunning
	}
	var u update
	u.Set(stored.FStatus, status)
	u.Set(stored.FFailedRuns, 0)
	u.Set(stored.FRunAt, now)
	u.Set(stored.FFree, free)
	u.Set(stored.FUpdatedAt, now)
	if t.Plan != nil {
		u.Set(stored.PScheduled, now)
	}
	u.Inc(stored.FRev, 1)
	u.settle(status, runsAfter(t), now, r)
	return u.doc(), ""
}

// RunNow makes a pending task claimable now. For a task with a plan, its
// current planned time runs now and the ones after it stay where they
// were.
func RunNow(t *stored.Task, now time.Time) (bson.D, string) {
	switch {
	case t.Status != stored.StatusPending:
		return nil, fmt.Sprintf("only a pending task can be run now; this one is %s", t.Status)
	case t.Paused:
		return nil, "the task is paused: resume it first"
	}
	var u update
	u.Set(stored.FRunAt, now)
	u.Set(stored.FUpdatedAt, now)
	if t.Plan != nil {
		u.Set(stored.PScheduled, now)
	}
	u.Inc(stored.FRev, 1)
	return u.doc(), ""
}

// Pause stops new runs of the task; runs going on finish. It applies to
// any task, by key.
func Pause(now time.Time) bson.D {
	var u update
	u.Set(stored.FPaused, true)
	u.Set(stored.FUpdatedAt, now)
	u.Inc(stored.FRev, 1)
	return u.doc()
}

// Resume lets a paused task run again. A task with a plan whose current
// occurrence passed while it was paused moves to step (computed by the
// plan's resume rule): a later planned time, or the plan's end.
func Resume(t *stored.Task, step *Step, now time.Time, r Retention) (bson.D, string) {
	if !t.Paused {
		return nil, "the task is not paused"
	}
	var u update
	u.Unset(stored.FPaused)
	u.Set(stored.FUpdatedAt, now)
	u.Inc(stored.FRev, 1)
	switch {
	case step == nil || t.Plan == nil:
	case step.Done:
		u.Set(stored.FStatus, stored.StatusFinished)
		u.Inc(stored.PSkipped, step.Skipped)
		u.Inc(stored.PMissedCount, step.Missed)
		u.settle(stored.StatusFinished, runsAfter(t), now, r)
	case !step.Next.Equal(t.Plan.Planned):
		u.Set(stored.FRunAt, step.Next)
		u.Set(stored.PPlanned, step.Next)
		u.Set(stored.PScheduled, now)
		u.Inc(stored.PSkipped, step.Skipped)
		u.Inc(stored.PMissedCount, step.Missed)
	}
	return u.doc(), ""
}

// SkipNext makes the task's plan skip its next n planned times; its filter
// selects only a task with a plan.
func SkipNext(id bson.RawValue, n int, now time.Time) (filter, upd bson.D) {
	var u update
	u.Set(stored.PSkipNext, n)
	u.Set(stored.FUpdatedAt, now)
	u.Inc(stored.FRev, 1)
	return append(ByID(id), bson.E{Key: stored.FPlan, Value: Op("$type", "object")}), u.doc()
}

// Edit is a change of a task's options and metadata; nil fields are left
// as they are. Durations are as stored, in milliseconds.
type Edit struct {
	Priority        *int
	Concurrency     *int
	WorkerIDs       *[]string
	Group           *string
	PingIntervalMS  *int64
	WorkerTimeoutMS *int64
	MaxRetries      *int
	RetryDelayMS    *int64
	MaxFailedRuns   *int
	TimeoutMS       *int64
	Description     *string
	Source          *string
	Tags            *[]string
}

// Apply is the update that makes the edit, its values already validated,
// on the task as read. A new concurrency moves the free slots with it, and
// the status of a task with no run going: succeeded when it has enough
// successes, pending when it needs more. The current occurrence of a plan
// completes only by its runs, so a concurrency it already has the
// successes of is refused: the reason is returned, for Concurrency.
func (e Edit) Apply(t *stored.Task, now time.Time, r Retention) (bson.D, string) {
	if c := e.Concurrency; c != nil && *c != t.Concurrency && t.Plan != nil {
		switch {
		case *c < t.Succeeded:
			return nil, fmt.Sprintf("must not be below the %d successes of the plan's current occurrence, got %d", t.Succeeded, *c)
		case *c == t.Succeeded && t.Running == 0:
			return nil, fmt.Sprintf("must be above the %d successes of the plan's current occurrence while no run of it is going, got %d: the occurrence would have no run left to complete it", t.Succeeded, *c)
		}
	}
	var u update
	u.Set(stored.FUpdatedAt, now)
	setIf := func(field string, v any, changed bool) {
		if changed {
			u.Set(field, v)
		}
	}
	setIf(stored.FPriority, deref(e.Priority), e.Priority != nil)
	setIf(stored.FPingIntervalMS, deref(e.PingIntervalMS), e.PingIntervalMS != nil)
	setIf(stored.FWorkerTimeoutMS, deref(e.WorkerTimeoutMS), e.WorkerTimeoutMS != nil)
	setIf(stored.FMaxRetries, deref(e.MaxRetries), e.MaxRetries != nil)
	setIf(stored.FRetryDelayMS, deref(e.RetryDelayMS), e.RetryDelayMS != nil)
	setIf(stored.FMaxFailedRuns, deref(e.MaxFailedRuns), e.MaxFailedRuns != nil)
	setIf(stored.FTimeoutMS, deref(e.TimeoutMS), e.TimeoutMS != nil)
	setIf(stored.FWorkerIDs, deref(e.WorkerIDs), e.WorkerIDs != nil)
	setIf(stored.FGroup, deref(e.Group), e.Group != nil)
	setIf(stored.FDescription, deref(e.Description), e.Description != nil)
	setIf(stored.FSource, deref(e.Source), e.Source != nil)
	setIf(stored.FTags, deref(e.Tags), e.Tags != nil)
	u.Inc(stored.FRev, 1)
	if e.Concurrency != nil && *e.Concurrency != t.Concurrency {
		delta := *e.Concurrency - t.Concurrency
		u.Set(stored.FConcurrency, *e.Concurrency)
		u.Inc(stored.FFree, delta)
		if status := statusAfterResize(t, t.Free+delta); status != "" {
			u.Set(stored.FStatus, status)
			u.settle(status, noRunLeft, now, r)
		}
	}
	return u.doc(), ""
}

// statusAfterResize is the status a concurrency change implies for a task
// with no run going: succeeded when it has enough successes, pending when
// it needs more. Running tasks settle at their runs' ends.
func statusAfterResize(t *stored.Task, free int) stored.Status {
	switch {
	case t.Running > 0 || t.Plan != nil:
		return ""
	case t.Status == stored.StatusSucceeded && free > 0:
		return stored.StatusPending
	case t.Status == stored.StatusPending && free <= 0:
		return stored.StatusSucceeded
	}
	return ""
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// Fresh sets the fields bound to the status of a task about to be
// inserted: no run, every slot free, pending, or finished for good when
// its plan has no planned time (then every slot stays free: the counters
// keep free = concurrency - running - succeeded in every status).
func Fresh(t *stored.Task, planDone bool, now time.Time, r Retention) {
	t.Status, t.Free, t.Running, t.Succeeded, t.FailedRuns = stored.StatusPending, t.Concurrency, 0, 0, 0
	t.Holders, t.DoneBy, t.NextExpiry, t.Invalid, t.ExpireAt, t.Unlogged = nil, nil, nil, nil, nil, nil
	t.Rev = 0
	if planDone {
		t.Status = stored.StatusFinished
		t.ExpireAt = r.TaskExpiry(stored.StatusFinished, now)
	}
}

// Publish is the upsert that applies a publish to a task that exists
// (the insert found its key taken): the task's params and run_at replaced
// as asked, skipping one with a run going when asked; an upsert, so that a
// task deleted meanwhile is inserted as fresh (t, made by Fresh). A task
// the filter excludes fails on the _id index: it is unchanged.
func Publish(t *stored.Task, insert bson.D, updateParams, moveRunAt, skipRunning bool) (filter, upd bson.D) {
	filter = ByID(KeyID(t.ID))
	if skipRunning && (updateParams || moveRunAt) {
		filter = append(filter, bson.E{Key: stored.FRunning, Value: 0})
	}
	var u update
	if updateParams {
		u.Set(stored.FParams, t.Params)
	}
	if moveRunAt {
		u.Set(stored.FRunAt, t.RunAt)
	}
	if len(u.set) > 0 {
		// Not rev: a rev edited by hand into another type would get the
		// whole PublishMany refused. A claim as read is fenced on the
		// params themselves (AsReadFence).
		u.Set(stored.FUpdatedAt, t.UpdatedAt)
	}
	u.setOnInsert = without(insert, fieldsOf(u.set)...)
	return filter, u.doc()
}

// Reset makes a task finished with no run going pending again with the
// published params, options and plan (t, made by Fresh; insert is t as
// update fields). It is an upsert too, so that a task that stopped being
// resettable since it was read fails on the _id index and is reported
// unchanged instead of being skipped silently.
func Reset(t *stored.Task, insert bson.D) (filter, upd bson.D) {
	filter = bson.D{
		{Key: stored.FID, Value: t.ID},
		{Key: stored.FStatus, Value: Op("$in", FinalStatuses)},
		{Key: stored.FRunning, Value: 0},
	}
	var u update
	u.set = without(insert, stored.FKey, stored.FCreatedAt, stored.FRev)
	// What the new task leaves out goes: an old plan, group or allow-list
	// kept would make the task the old one again. The runs and their
	// history marks stay.
	for _, f := range resetFields {
		if !has(insert, f) {
			u.Unset(f)
		}
	}
	u.Inc(stored.FRev, 1)
	return filter, u.doc()
}

// resetFields are the fields a task may lack, which a reset removes when
// the new task lacks them.
var resetFields = []string{stored.FWorkerIDs, stored.FGroup, stored.FTimeoutMS, stored.FDescription, stored.FSource, stored.FTags, stored.FHeaders,
	stored.FPlan, stored.FPaused, stored.FInvalid, stored.FHolders, stored.FDoneBy, stored.FNextExpiry, stored.FExpireAt}

func has(d bson.D, field string) bool {
	for _, e := range d {
		if e.Key == field {
			return true
		}
	}
	return false
}

func fieldsOf(d bson.D) []string {
	out := make([]string, len(d))
	for i, e := range d {
		out[i] = e.Key
	}
	return out
}

// without is fields without those named (and without _id, which an
// upsert takes from its filter).
func without(fields bson.D, names ...string) bson.D {
	skip := map[string]bool{stored.FID: true}
	for _, n := range names {
		skip[n] = true
	}
	out := bson.D{}
	for _, e := range fields {
		if !skip[e.Key] {
			out = append(out, e)
		}
	}
	return out
}

// Migrate moves every document of an older layout to the current one:
// from 1 to 2 no field changes meaning, so the step only stamps the
// version.
func Migrate() (filter, upd bson.D) {
	var u update
	u.Set(stored.FSchema, stored.SchemaVersion)
	return bson.D{{Key: stored.FSchema, Value: Op("$lt", stored.SchemaVersion)}}, u.doc()
}

// MarksWritten removes, from one task, the history marks of runs whose
// history record is written.
func MarksWritten(id bson.RawValue, runIDs []string) (filter, upd bson.D) {
	var u update
	for _, runID := range runIDs {
		u.Unset(stored.UnloggedPath(runID))
	}
	return ByID(id), u.doc()
}
