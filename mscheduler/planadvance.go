package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// planAdvance is how a run end that completes an occurrence moves its task
// to the next planned time. The write is fenced on the occurrence's planned
// time, so two run ends can never both schedule from it, and on the plan
// state the step was computed from.
type planAdvance struct {
	sched       *schedule
	planned     time.Time // the occurrence the run belongs to
	runs        int       // runs before this occurrence
	skipped     int       // planned times skipped before it
	skipNext    int
	concurrency int
	started     time.Time // the run's start: later planned times overran it
	now         time.Time
	step        Step
}

// newPlanAdvance prepares the advance of a task with a plan, or returns nil
// for a task without one or with a plan that no longer compiles (edited by
// hand: its runs fail, naming the field, and the task ends as a plain one).
func newPlanAdvance(doc *taskDoc, started, now time.Time) *planAdvance {
	if doc.Plan == nil {
		return nil
	}
	s, err := doc.Plan.schedule()
	if err != nil {
		return nil
	}
	// A run that started on time (within grace of when its occurrence
	// became due, which for a queued occurrence is after its planned time)
	// did not miss anything before its start.
	if due := maxTime(doc.Plan.Planned, doc.Plan.Scheduled); !started.After(due.Add(s.grace)) {
		started = doc.Plan.Planned
	}
	a := &planAdvance{sched: s, planned: doc.Plan.Planned, runs: doc.Plan.Runs, skipped: doc.Plan.Skipped, started: started, now: now}
	a.refresh(doc.Concurrency, doc.Plan.SkipNext)
	return a
}

// refresh recomputes the step from options read again.
func (a *planAdvance) refresh(concurrency, skipNext int) {
	a.concurrency, a.skipNext = concurrency, skipNext
	a.step = a.sched.next(PlanState{Last: a.planned, Runs: a.runs + 1, Skipped: a.skipped, Started: a.started, SkipNext: skipNext}, a.now)
}

// missed is how many of the step's skipped planned times were missed: the
// step consumes the plan's skip_next, and the write sets it to 0.
func (a *planAdvance) missed() int { return missedOf(a.step, a.skipNext) }

func (a *planAdvance) fence() bson.D {
	return bson.D{
		{Key: pPlanned, Value: a.planned},
		skipNextFence(a.skipNext),
		{Key: fConcurrency, Value: a.concurrency},
	}
}

// advanceUpdate ends the run and starts the next occurrence: the counters
// of a fresh task, run_at at the next planned time.
func (e *runEnd) advanceUpdate() bson.D {
	a := e.advance
	return bson.D{
		{Key: "$unset", Value: bson.D{{Key: holderPath(e.workerID), Value: ""}, {Key: fNextExpiry, Value: ""}, {Key: fDoneBy, Value: ""}, {Key: pStarted, Value: ""}}},
		{Key: "$inc", Value: bson.D{{Key: fRunning, Value: -1}, {Key: fRev, Value: 1}, {Key: pRuns, Value: 1}, {Key: pSkipped, Value: a.step.Skipped}, {Key: pMissedCount, Value: a.missed()}}},
		{Key: "$push", Value: e.pushRecord()},
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: StatusPending},
			{Key: fRunAt, Value: a.step.Next},
			{Key: pPlanned, Value: a.step.Next},
			{Key: pScheduled, Value: e.now},
			{Key: pSkipNext, Value: 0},
			{Key: fFree, Value: a.concurrency},
			{Key: fSucceeded, Value: 0},
			{Key: fFailedRuns, Value: 0},
			{Key: fUpdatedAt, Value: e.now},
			e.unloggedMark(),
		}},
	}
}

// skipNextFence matches a plan's skip_next of n; 0 also matches a plan
// edited by hand without the field.
func skipNextFence(n int) bson.E {
	if n == 0 {
		return bson.E{Key: pSkipNext, Value: op("$in", bson.A{0, nil})}
	}
	return bson.E{Key: pSkipNext, Value: n}
}
