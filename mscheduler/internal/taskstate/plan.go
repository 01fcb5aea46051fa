package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Step is where a plan goes from its current occurrence: the next planned
// time, how many were passed over to reach it (Missed of them missed
// rather than skipped on request), or Done when none is left.
type Step struct {
	Next    time.Time
	Skipped int
	Missed  int
	Done    bool
}

// Planner computes a plan's step from its position: the occurrence
// planned, the runs and planned times skipped before it, the pending
// skips (skip_next) and the task's concurrency. The plan's rules live
// with the plan; the owner only writes where they lead.
type Planner func(planned time.Time, runs, skipped, skipNext, concurrency int) Step

// Advance is how a run end that completes an occurrence moves its task to
// the next planned time. The write is fenced on the occurrence's planned
// time, so two run ends can never both schedule from it, and on the plan
// state the step was computed from.
type Advance struct {
	Planned     time.Time // the occurrence the run belongs to
	Runs        int       // runs before this occurrence
	Skipped     int       // planned times skipped before it
	SkipNext    int
	Concurrency int
	Step        Step
	Next        Planner
}

// Refresh recomputes the step from options read again.
func (a *Advance) Refresh(concurrency, skipNext int) {
	a.Concurrency, a.SkipNext = concurrency, skipNext
	a.Step = a.Next(a.Planned, a.Runs, a.Skipped, skipNext, concurrency)
}

func (a *Advance) fence() bson.D {
	return bson.D{
		{Key: stored.PPlanned, Value: a.Planned},
		SkipNextFence(a.SkipNext),
		{Key: stored.FConcurrency, Value: a.Concurrency},
	}
}

// SkipNextFence matches a plan's skip_next of n; 0 also matches a plan
// edited by hand without the field.
func SkipNextFence(n int) bson.E {
	if n == 0 {
		return bson.E{Key: stored.PSkipNext, Value: Op("$in", bson.A{0, nil})}
	}
	return bson.E{Key: stored.PSkipNext, Value: n}
}

// advanceUpdate ends the run and starts the next occurrence: the counters
// of a fresh task, run_at at the next planned time.
func (e *End) advanceUpdate() bson.D {
	a := e.Advance
	var u update
	u.Unset(stored.HolderPath(e.WorkerID))
	u.Unset(stored.FDoneBy)
	u.Unset(stored.PStarted)
	u.Inc(stored.FRunning, -1)
	u.Inc(stored.FRev, 1)
	u.Inc(stored.PRuns, 1)
	u.Inc(stored.PSkipped, a.Step.Skipped)
	u.Inc(stored.PMissedCount, a.Step.Missed)
	e.pushRecord(&u)
	u.Set(stored.FStatus, stored.StatusPending)
	u.Set(stored.FRunAt, a.Step.Next)
	u.Set(stored.PPlanned, a.Step.Next)
	u.Set(stored.PScheduled, e.Now)
	u.Set(stored.PSkipNext, 0)
	u.Set(stored.FFree, a.Concurrency)
	u.Set(stored.FSucceeded, 0)
	u.Set(stored.FFailedRuns, 0)
	u.Set(stored.FUpdatedAt, e.Now)
	u.Set(stored.UnloggedPath(e.Record.RunID), e.Record.Finished)
	u.settle(stored.StatusPending, noRunLeft, e.Now, e.Retention)
	return u.doc()
}

// FirstStart is a claimed run that is the first start of its task's
// occurrence, judged by the plan's missed-run policy and pending skips
// (the plan gate): it goes ahead as claimed (Begin records it when other
// slots wait for it), runs in the place of a later planned time that is
// due (Retarget), or gives its slot back, the task waiting for a later
// planned time or finished (GiveBack). Whether an occurrence has begun is
// what the gate's first pass records (plan.started), never inferred from
// counters: until it is recorded, no other slot of the task can be claimed,
// so one gate alone decides the occurrence's fate.
type FirstStart struct {
	ID          bson.RawValue
	WorkerID    string
	RunID       string
	Planned     time.Time // the occurrence as claimed
	SkipNext    int
	Concurrency int
	Step        Step
	Now         time.Time
	Retention   Retention
}

// undecided fences a gate's write on what the gate judged: the run still
// held, the task still running as the claim left it (a cancel since wins),
// and the occurrence as read, not yet recorded begun.
func (f *FirstStart) undecided() bson.D {
	return append(RunFence(f.ID, f.WorkerID, f.RunID),
		bson.E{Key: stored.FStatus, Value: stored.StatusRunning},
		bson.E{Key: stored.PPlanned, Value: f.Planned}, SkipNextFence(f.SkipNext),
		bson.E{Key: stored.PStarted, Value: Op("$ne", true)})
}

// Filter fences a write that moves the occurrence (GiveBack, Retarget) on
// the run being its only start so far, and on what the gate judged.
func (f *FirstStart) Filter() bson.D {
	return append(f.undecided(),
		bson.E{Key: stored.FRunning, Value: 1}, bson.E{Key: stored.FSucceeded, Value: 0}, bson.E{Key: stored.FFailedRuns, Value: 0})
}

// BeginFilter fences Begin on what the gate judged.
func (f *FirstStart) BeginFilter() bson.D { return f.undecided() }

// Begin records that the occurrence has begun, as claimed: from then on
// its other slots may be claimed (see Claimant.Eligible), and no gate
// judges it again.
func (f *FirstStart) Begin() bson.D {
	var u update
	u.Set(stored.PStarted, true)
	return u.doc()
}

// Retarget moves the occurrence the run belongs to to the step's planned
// time, which is due: the run goes ahead in its place.
func (f *FirstStart) Retarget() bson.D {
	var u update
	u.Set(stored.PPlanned, f.Step.Next)
	u.Set(stored.PScheduled, f.Now)
	u.Set(stored.FRunAt, f.Step.Next)
	u.Set(stored.PSkipNext, 0)
	u.Inc(stored.PSkipped, f.Step.Skipped)
	u.Inc(stored.PMissedCount, f.Step.Missed)
	u.Set(stored.PStarted, true)
	u.Inc(stored.FRev, 1)
	return u.doc()
}

// GiveBack undoes the claim and moves the task to the step's planned time,
// or finishes it.
func (f *FirstStart) GiveBack() bson.D {
	var u update
	u.Unset(stored.HolderPath(f.WorkerID))
	u.Inc(stored.FRunning, -1)
	u.Inc(stored.FFree, 1)
	u.Inc(stored.FRev, 1)
	u.Inc(stored.PSkipped, f.Step.Skipped)
	u.Inc(stored.PMissedCount, f.Step.Missed)
	u.Set(stored.PSkipNext, 0)
	u.Set(stored.FUpdatedAt, f.Now)
	status := stored.StatusFinished
	if !f.Step.Done {
		status = stored.StatusPending
		u.Set(stored.FRunAt, f.Step.Next)
		u.Set(stored.PPlanned, f.Step.Next)
		u.Set(stored.PScheduled, f.Now)
	}
	u.Set(stored.FStatus, status)
	u.settle(status, noRunLeft, f.Now, f.Retention)
	return u.doc()
}
