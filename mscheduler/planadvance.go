package mscheduler

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// newPlanAdvance prepares the advance of a task with a plan (see
// taskstate.Advance), or returns nil for a task without one or with a plan
// that no longer compiles (edited by hand: its runs fail, naming the field,
// and the task ends as a plain one).
func newPlanAdvance(doc *taskDoc, started, now time.Time) *taskstate.Advance {
	if doc.Plan == nil {
		return nil
	}
	s, err := scheduleOf(doc.Plan)
	if err != nil {
		return nil
	}
	// A run that started on time (within grace of when its occurrence
	// became due, which for a queued occurrence is after its planned time)
	// did not miss anything before its start.
	if due := maxTime(doc.Plan.Planned, doc.Plan.Scheduled); !started.After(due.Add(s.grace)) {
		started = doc.Plan.Planned
	}
	next := func(planned time.Time, runs, skipped, skipNext, _ int) taskstate.Step {
		step := s.next(PlanState{Last: planned, Runs: runs + 1, Skipped: skipped, Started: started, SkipNext: skipNext}, now)
		return *ownerStep(step, skipNext)
	}
	a := &taskstate.Advance{Planned: doc.Plan.Planned, Runs: doc.Plan.Runs, Skipped: doc.Plan.Skipped, Next: next}
	a.Refresh(doc.Concurrency, doc.Plan.SkipNext)
	return a
}
