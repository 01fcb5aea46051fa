package mscheduler

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// planGate judges a claimed run that is the first start of its task's
// occurrence, under the plan's missed-run policy and pending skips. It
// returns true when the run goes ahead: as claimed, or in the place of a
// later planned time that is due. It returns false when it gave the slot
// back, the task now waiting for a later planned time or finished.
//
// Runs after the first (retries, other slots, a run whose worker died) are
// not judged: an occurrence that started is completed, however late.
func (c *Consumer[P, R]) planGate(doc *taskDoc) bool {
	if doc.Plan == nil || doc.Plan.Started || doc.corrupt != nil || doc.Running != 1 || doc.Succeeded != 0 || doc.FailedRuns != 0 {
		return true
	}
	s, err := doc.Plan.schedule()
	if err != nil {
		return true // the run fails at once, naming the field
	}
	now, planned := c.clock.Now(), doc.Plan.Planned
	if due := maxTime(planned, doc.Plan.Scheduled); doc.Plan.SkipNext == 0 && !now.After(due.Add(s.grace)) {
		return true // on time
	}
	step := s.atStart(planned, doc.Plan.Runs, doc.Plan.SkipNext, now)
	if !step.Done && step.Next.Equal(planned) {
		return true
	}
	h := doc.Holders[c.cfg.WorkerID]
	filter := append(fence(doc.Key, c.cfg.WorkerID, h.Run),
		bson.E{Key: fRunning, Value: 1}, bson.E{Key: fSucceeded, Value: 0}, bson.E{Key: fFailedRuns, Value: 0},
		bson.E{Key: pPlanned, Value: planned}, skipNextFence(doc.Plan.SkipNext))
	retarget := !step.Done && !step.Next.After(now)
	update := giveBackUpdate(c.cfg.WorkerID, doc.Concurrency, step, now)
	if retarget {
		update = bson.D{
			{Key: "$set", Value: bson.D{{Key: pPlanned, Value: step.Next}, {Key: pScheduled, Value: now}, {Key: fRunAt, Value: step.Next}, {Key: pSkipNext, Value: 0}}},
			{Key: "$inc", Value: bson.D{{Key: pSkipped, Value: step.Skipped}, {Key: fRev, Value: 1}}},
		}
	}
	ctx, cancel := c.writeCtx()
	defer cancel()
	res, err := c.coll.UpdateOne(ctx, filter, update)
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
		return true
	}
	c.log.Info("missed planned times skipped", "key", doc.Key, "skipped", step.Skipped, "next", step.Next, "finished", step.Done)
	c.wake() // the claim loop looks again, and learns the next planned time
	return false
}

// giveBackUpdate undoes a claim and moves the task to the step's planned
// time, or finishes it.
func giveBackUpdate(workerID string, concurrency int, step Step, now time.Time) bson.D {
	set := bson.D{{Key: fStatus, Value: StatusPending}, {Key: fRunAt, Value: step.Next}, {Key: pPlanned, Value: step.Next}, {Key: pScheduled, Value: now}}
	if step.Done {
		set = bson.D{{Key: fStatus, Value: StatusFinished}, {Key: fFree, Value: 0}}
	}
	set = append(set, bson.E{Key: pSkipNext, Value: 0}, bson.E{Key: fUpdatedAt, Value: now})
	inc := bson.D{{Key: fRunning, Value: -1}, {Key: fRev, Value: 1}, {Key: pSkipped, Value: step.Skipped}}
	if !step.Done {
		inc = append(inc, bson.E{Key: fFree, Value: 1})
	}
	return bson.D{
		{Key: "$unset", Value: bson.D{{Key: holderPath(workerID), Value: ""}, {Key: fNextExpiry, Value: ""}}},
		{Key: "$inc", Value: inc},
		{Key: "$set", Value: set},
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
