package mscheduler

import (
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// planGate judges a claimed run that is the first start of its task's
// occurrence, under the plan's missed-run policy and pending skips. It
// returns true when the run goes ahead: as claimed, or in the place of a
// later planned time that is due. It returns false when it gave the slot
// back, the task now waiting for a later planned time or finished.
//
// Runs after the first (retries, other slots, a run whose worker died) are
// not judged: an occurrence that started is completed, however late.
func (c *engine) planGate(doc *taskDoc) bool {
	if doc.Plan == nil {
		return true
	}
	s, err := scheduleOf(doc.Plan)
	if err != nil {
		return true // not reached: a claimed plan was inspected
	}
	now, planned := c.clock.Now(), doc.Plan.Planned
	step := s.firstStart(doc.Plan, doc.Running-1, doc.Succeeded, doc.FailedRuns, now)
	if !step.Done && step.Next.Equal(planned) {
		return true
	}
	fs := &taskstate.FirstStart{
		ID: doc.RawID, WorkerID: c.cfg.WorkerID, RunID: doc.Holders[c.cfg.WorkerID].Run,
		Planned: planned, SkipNext: doc.Plan.SkipNext, Concurrency: doc.Concurrency,
		// The step consumed the pending skips (the write sets skip_next to 0).
		Step: *ownerStep(step, doc.Plan.SkipNext), Now: now, Retention: c.cfg.Retention.policy(),
	}
	retarget := !step.Done && !step.Next.After(now)
	update := fs.GiveBack()
	if retarget {
		update = fs.Retarget()
	}
	ctx, cancel := c.writeCtx()
	defer cancel()
	res, err := c.coll.UpdateOne(ctx, fs.Filter(), update)
	if err != nil || res.MatchedCount == 0 {
		// Another run of the occurrence started meanwhile, or the write
		// failed: the claimed run goes ahead as it is.
		if err != nil {
			c.loopError(ctx, fmt.Errorf("mscheduler: apply plan of %q: %w", doc.Key, err))
		}
		return true
	}
	c.emit(Event{Kind: EventSkipped, Key: doc.Key, Skipped: step.Skipped, Planned: step.Next})
	if retarget {
		c.log.Info("missed planned times skipped; running the latest", "key", doc.Key, "skipped", step.Skipped, "planned", step.Next)
		doc.Plan.Planned, doc.Plan.Skipped, doc.Plan.SkipNext, doc.RunAt = step.Next, doc.Plan.Skipped+step.Skipped, 0, step.Next
		doc.Plan.MissedCount += fs.Step.Missed
		return true
	}
	c.log.Info("missed planned times skipped", "key", doc.Key, "skipped", step.Skipped, "next", step.Next, "finished", step.Done)
	c.wake() // the claim loop looks again, and learns the next planned time
	return false
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
