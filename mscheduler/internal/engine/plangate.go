package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// gateTries bounds how often the gate judges a claimed run again after its
// write missed because the task changed meanwhile (a skip, an edit).
// Past it, the claim is given back unrun and the next claim judges anew.
const gateTries = 4

// gateVerdict is what the gate did with a claimed run.
type gateVerdict int

const (
	gateRun    gateVerdict = iota // the run goes ahead
	gateDone                      // the slot was given back: no run
	gateMissed                    // the write missed: the task changed since it was read
)

// planGate judges a claimed run that is the first start of its task's
// occurrence, under the plan's missed-run policy and pending skips. It
// returns true when the run goes ahead: as claimed, or in the place of a
// later planned time that is due. It returns false when the slot was given
// back: the task waits for a later planned time or is finished, or it
// changed under the gate (cancelled, say) so that the run must not start.
//
// Runs of an occurrence recorded begun (plan.started) are not judged: an
// occurrence that started is completed, however late. Until the gate
// records it, no other slot of the task can be claimed, so the gate's
// decision is the only one; every write it makes is fenced on what it
// judged, and a miss is judged again from the task as it is now.
func (c *Engine) planGate(doc *stored.Task) bool {
	for try := 1; ; try++ {
		if doc.Plan == nil || doc.Plan.Started || doc.Running > 1 {
			// No plan, begun, or begun by runs the gate did not see start
			// (a document written before plan.started was recorded).
			return true
		}
		if doc.Status != stored.StatusRunning {
			c.endUnstarted(doc, stored.OutcomeCancelled, "the task became "+string(doc.Status)+" before the run started")
			return false
		}
		switch c.judgeFirstStart(doc) {
		case gateRun:
			return true
		case gateDone:
			return false
		}
		if try == gateTries {
			c.endUnstarted(doc, stored.OutcomeReleased, "the task kept changing while its plan was judged; released unrun")
			return false
		}
		fresh, err := c.readClaimed(doc)
		switch {
		case err != nil:
			// What the task became is unknown: the run must not start on a
			// guess. Its end, fenced on the run, gives the slot back if the
			// claim still holds it.
			c.loopError(context.Background(), fmt.Errorf("mscheduler: read %q again for its plan: %w", doc.Key, err))
			c.endUnstarted(doc, stored.OutcomeReleased, "its plan could not be judged: "+err.Error())
			return false
		case fresh == nil:
			return false // the claim is gone: swept, deleted, taken over
		}
		doc = fresh
	}
}

// judgeFirstStart judges the occurrence once, from doc as read, and makes
// the fenced write the judgement calls for.
func (c *Engine) judgeFirstStart(doc *stored.Task) gateVerdict {
	now, planned := c.clock.Now(), doc.Plan.Planned
	step, ok := c.cfg.Documents.FirstStart(doc, now)
	if !ok {
		return gateRun // not reached: a claimed plan was inspected
	}
	fs := &taskstate.FirstStart{
		ID: doc.RawID, WorkerID: c.cfg.WorkerID, RunID: doc.Holders[c.cfg.WorkerID].Run,
		Planned: planned, SkipNext: doc.Plan.SkipNext, Concurrency: doc.Concurrency,
		// The step consumed the pending skips (the write sets skip_next to 0).
		Step: step, Now: now, Retention: c.cfg.Retention,
	}
	asClaimed := !step.Done && step.Next.Equal(planned)
	if asClaimed && doc.Concurrency <= 1 {
		// No other slot waits for the record: the occurrence is begun by
		// this run, and a later gate would find it begun by its counters.
		return gateRun
	}
	retarget := !step.Done && !step.Next.After(now)
	filter, update := fs.Filter(), fs.GiveBack()
	switch {
	case asClaimed:
		filter, update = fs.BeginFilter(), fs.Begin()
	case retarget:
		update = fs.Retarget()
	}
	ctx, cancel := c.writeCtx()
	defer cancel()
	res, err := c.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		// The write's fate is unknown, and it may still land: the task is
		// read again and judged anew. A write made since is fenced on what
		// this one would change, so at most one of them lands.
		c.log.Warn("could not apply the plan of a claimed run; judging it again", "key", doc.Key, "error", err)
		return gateMissed
	}
	if res.MatchedCount == 0 {
		return gateMissed
	}
	if asClaimed {
		return gateRun
	}
	c.emit(Event{Kind: EventSkipped, Key: doc.Key, Skipped: step.Skipped, Planned: step.Next})
	c.tellIfEnded(doc.Key, update)
	if retarget {
		c.log.Info("missed planned times skipped; running the latest", "key", doc.Key, "skipped", step.Skipped, "planned", step.Next)
		doc.Plan.Planned, doc.Plan.Skipped, doc.Plan.SkipNext, doc.RunAt = step.Next, doc.Plan.Skipped+step.Skipped, 0, step.Next
		doc.Plan.MissedCount += fs.Step.Missed
		doc.Plan.Started = true
		return gateRun
	}
	c.log.Info("missed planned times skipped", "key", doc.Key, "skipped", step.Skipped, "next", step.Next, "finished", step.Done)
	c.wake() // the claim loop looks again, and learns the next planned time
	return gateDone
}

// readClaimed reads the task of a claimed run again while the run still
// holds it; nil when it does not.
func (c *Engine) readClaimed(doc *stored.Task) (*stored.Task, error) {
	ctx, cancel := c.writeCtx()
	defer cancel()
	fence := taskstate.RunFence(doc.RawID, c.cfg.WorkerID, doc.Holders[c.cfg.WorkerID].Run)
	raw, err := c.coll.FindOne(ctx, fence, options.FindOne().SetProjection(bson.D{{Key: stored.FRuns, Value: 0}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fresh, prob := c.cfg.Documents.Inspect(raw)
	if prob != nil {
		return nil, fmt.Errorf("the task as read again: %s", prob.Error())
	}
	return fresh, nil
}

// endUnstarted ends a claimed run whose handler never started, with
// outcome and why, as a run end: the task's counters and status move as
// for any run end, and the record says why it did not run. The plan is
// left as it is: the run began no occurrence.
func (c *Engine) endUnstarted(doc *stored.Task, outcome stored.Outcome, why string) {
	r := c.leasedRun(doc)
	r.Finished.Store(true)
	end := c.newRunEnd(r, 0)
	end.Advance = nil
	end.Record.Outcome, end.Record.Error = outcome, why
	c.log.Info("claimed run ended before it started", "key", doc.Key, "run_id", r.RunID, "outcome", outcome, "why", why)
	c.writeEnd(r, end)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
