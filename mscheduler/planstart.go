package mscheduler

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// firstStartStep is the step of a claimed task's plan at the first start
// of an occurrence, for the engine's plan gate; false when the task has no
// plan that compiles.
func firstStartStep(doc *taskDoc, now time.Time) (taskstate.Step, bool) {
	if doc.Plan == nil {
		return taskstate.Step{}, false
	}
	s, err := scheduleOf(doc.Plan)
	if err != nil {
		return taskstate.Step{}, false
	}
	step := s.firstStart(doc.Plan, doc.Running-1, doc.Succeeded, doc.FailedRuns, now)
	return *ownerStep(step, doc.Plan.SkipNext), true
}

// firstStart decides what a start of the plan's current occurrence does at
// now, when others (running, succeeded, failed runs) may have begun it: an
// occurrence that has begun, or that became due at most grace ago, runs
// (Next == pl.Planned); a late one follows the missed-run policy. The claim
// gate, Resume and TaskInfo.Upcoming all decide with it.
func (s *schedule) firstStart(pl *planDoc, running, succeeded, failedRuns int, now time.Time) Step {
	begun := pl.Started || running > 0 || succeeded > 0 || failedRuns > 0
	due := maxTime(pl.Planned, pl.Scheduled)
	if begun || (pl.SkipNext == 0 && !now.After(due.Add(s.grace))) {
		return Step{Next: pl.Planned}
	}
	return s.atStart(pl.Planned, pl.Runs+pl.Skipped, pl.SkipNext, now, s.missed)
}

// resumeStep is what Resume does to the plan's current occurrence: one that
// has begun is completed; otherwise it is judged as a late first start
// under MissedSkip with no grace: every planned time that came while the
// task was paused is skipped.
func (s *schedule) resumeStep(pl *planDoc, running, succeeded, failedRuns int, now time.Time) Step {
	if pl.Started || running > 0 || succeeded > 0 || failedRuns > 0 {
		return Step{Next: pl.Planned}
	}
	strict := *s
	strict.grace = 0
	return strict.atStart(pl.Planned, pl.Runs+pl.Skipped, 0, now, MissedSkip)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
