package engine

import (
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
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
func (c *Engine) planGate(doc *stored.Task) bool {
	if doc.Plan == nil {
		return true
	}
	now, planned := c.clock.Now(), doc.Plan.Planned
	step, ok := c.cfg.Documents.FirstStart(doc, now)
	if !ok {
		return true // not reached: a claimed plan was inspected
	}
	if !step.Done && step.Next.Equal(planned) {
		return true
	}
	fs := &taskstate.FirstStart{
		ID: doc.RawID, WorkerID: c.cfg.WorkerID, RunID: doc.Holders[c.cfg.WorkerID].Run,
		Planned: planned, SkipNext: doc.Plan.SkipNext, Concurrency: doc.Concurrency,
		// The step consumed the pending skips (the write sets skip_next to 0).
		Step: step, Now: now, Retention: c.cfg.Retention,
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
