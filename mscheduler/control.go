package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Pause stops new runs of the task; runs going on finish. The planned times
// of a paused task's plan keep passing: they are counted as skipped when it
// resumes. It returns [ErrNotFound] if no task has the key.
func (p *Producer[P]) Pause(ctx context.Context, key string) error {
	if err := p.checkSchema(ctx); err != nil {
		return err
	}
	res, err := p.coll.UpdateOne(ctx, taskstate.ByID(taskstate.KeyID(key)), taskstate.Pause(p.clock.Now()))
	if err != nil {
		return fmt.Errorf("mscheduler: pause %q: %w", key, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("mscheduler: pause %q: %w", key, ErrNotFound)
	}
	return nil
}

// Resume lets a paused task run again; on a task that is not paused it
// returns an *ActionError and writes nothing. A task with a plan continues
// from its first planned time after now; the planned times that passed
// while it was paused are counted as skipped (if none is left, the plan
// finishes). It returns [ErrNotFound] if no task has the key.
func (p *Producer[P]) Resume(ctx context.Context, key string) error {
	return p.rewrite(ctx, key, "resume", needs(fPaused, fStatus, fPlan, fRunning, fSucceeded, fFailedRuns), func(doc *readTask, now time.Time) (bson.D, error) {
		step, err := resumeStep(doc.Task, now)
		if err != nil {
			return nil, fmt.Errorf("mscheduler: resume %q: %w", key, err)
		}
		update, why := taskstate.Resume(doc.Task, step, now, p.cfg.Retention.policy())
		if why != "" {
			return nil, notApplicable("resume", doc.Task, "%s", why)
		}
		return update, nil
	})
}

// resumeStep is where Resume moves a pending task's plan: for a plan whose
// current planned time passed while no run of it was going, as a late
// first start under MissedSkip with no grace would, to the first planned
// time after now, the others skipped and counted as missed too (none
// left: the plan finishes). Pending skips are left for the claim to apply.
// Nil for a task without a plan, or not pending.
func resumeStep(doc *taskDoc, now time.Time) (*taskstate.Step, error) {
	pl := doc.Plan
	if pl == nil || doc.Status != StatusPending {
		return nil, nil
	}
	s, err := scheduleOf(pl)
	if err != nil {
		return nil, err
	}
	step := s.resumeStep(pl, doc.Running, doc.Succeeded, doc.FailedRuns, now)
	return ownerStep(step, 0), nil
}

// ownerStep is a plan's step as the owner of a task's state writes it:
// skipNext is the plan's skip_next the step consumed (0 if it did not).
func ownerStep(step Step, skipNext int) *taskstate.Step {
	return &taskstate.Step{Next: step.Next, Skipped: step.Skipped, Missed: missedOf(step, skipNext), Done: step.Done}
}

// rewriteTries bounds how often a rewrite reads again after a concurrent
// write.
const rewriteTries = 5

// rewrite reads the task, builds a write from what it read, and applies it
// fenced on the task as read (fence), reading again when a concurrent
// write moved the task. A nil write means there is nothing to do; an
// error from build is returned as it is, and nothing is written. A stored
// field the action needs (need) that cannot be read refuses it, naming
// the field.
func (p *Producer[P]) rewrite(ctx context.Context, key, verb string, need func(string) bool, build func(doc *readTask, now time.Time) (bson.D, error)) error {
	for try := 0; try < rewriteTries; try++ {
		doc, err := p.read(ctx, key, verb, need)
		if err != nil {
			return err
		}
		update, err := build(doc, p.clock.Now())
		if err != nil || update == nil {
			return err
		}
		res, err := p.coll.UpdateOne(ctx, doc.fence(), update)
		if err != nil {
			return fmt.Errorf("mscheduler: %s %q: %w", verb, key, err)
		}
		if res.MatchedCount > 0 {
			localwake.Wake(p.coll)
			if taskstate.EndsTask(update) {
				localwake.Ended(p.coll, key)
			}
			return nil
		}
	}
	return fmt.Errorf("mscheduler: %s %q: the task kept changing; try again", verb, key)
}

// needs says a stored field is one of fields, or under one of them.
func needs(fields ...string) func(string) bool {
	return func(f string) bool {
		for _, n := range fields {
			if f == n || strings.HasPrefix(f, n+".") {
				return true
			}
		}
		return false
	}
}

// read reads the task for an action (without its params and runs),
// through the gate: the fields that decode, and its rev as stored. A
// field the action needs that does not decode refuses the action, naming
// the field; the others do not matter to it.
func (p *Producer[P]) read(ctx context.Context, key, verb string, need func(string) bool) (*readTask, error) {
	if err := p.clock.Ensure(ctx, p.coll.Database()); err != nil {
		return nil, err
	}
	if err := p.checkSchema(ctx); err != nil {
		return nil, err
	}
	raw, err := p.coll.FindOne(ctx, taskstate.ByID(taskstate.KeyID(key)), options.FindOne().SetProjection(bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: %s %q: %w", verb, key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: %s %q: %w", verb, key, err)
	}
	doc, probs := stored.DecodeFields(raw)
	for _, prob := range probs {
		if prob.Field == stored.WholeDocument || need(prob.Field) {
			return nil, fmt.Errorf("mscheduler: %s %q: the document cannot be read: %w", verb, key, prob)
		}
	}
	return &readTask{Task: doc, rawRev: raw.Lookup(fRev), rawUpdatedAt: raw.Lookup(fUpdatedAt)}, nil
}

// readTask is a task as an action read it.
type readTask struct {
	*stored.Task
	// rawRev and rawUpdatedAt are as stored, whatever their type: the
	// action's fence.
	rawRev, rawUpdatedAt bson.RawValue
}

// fence selects the task only while it is as read: the write of an action
// never lands on a task that changed since, even one only republished.
func (doc *readTask) fence() bson.D {
	return taskstate.Unchanged(doc.RawID, doc.rawRev, doc.rawUpdatedAt)
}

// SkipNextMax is the most planned times one SkipNext call skips; to stop a
// plan for longer, Pause it.
const SkipNextMax = 10_000

// SkipNext makes the task's plan skip its next n planned times (replacing
// any earlier count; 0 cancels). They are counted as skipped. It returns
// [ErrNotFound] if no task has the key, and an *InvalidError if the task
// has no plan.
func (p *Producer[P]) SkipNext(ctx context.Context, key string, n int) error {
	if n < 0 || n > SkipNextMax {
		return invalid("n", "must be from 0 to %d, got %d", SkipNextMax, n)
	}
	if err := p.checkSchema(ctx); err != nil {
		return err
	}
	filter, update := taskstate.SkipNext(taskstate.KeyID(key), n, p.clock.Now())
	res, err := p.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, err)
	}
	if res.MatchedCount > 0 {
		return nil
	}
	n64, err := p.coll.CountDocuments(ctx, taskstate.ByID(taskstate.KeyID(key)))
	switch {
	case err != nil:
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, err)
	case n64 == 0:
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, ErrNotFound)
	}
	return invalid("key", "task %q has no plan", key)
}
