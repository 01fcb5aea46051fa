package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Pause stops new runs of the task; runs going on finish. The planned times
// of a paused task's plan keep passing: they are counted as skipped when it
// resumes. It returns [ErrNotFound] if no task has the key.
func (p *Producer[P]) Pause(ctx context.Context, key string) error {
	if err := p.checkSchema(ctx); err != nil {
		return err
	}
	res, err := p.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: key}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: fPaused, Value: true}, {Key: fUpdatedAt, Value: p.clock.Now()}}},
		{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}},
	})
	if err != nil {
		return fmt.Errorf("mscheduler: pause %q: %w", key, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("mscheduler: pause %q: %w", key, ErrNotFound)
	}
	return nil
}

// Resume lets a paused task run again; on a task that is not paused it
// returns an *ActionError and writes nothing. A task with a plan continues from its first planned time after
// now; the planned times that passed while it was paused are counted as
// skipped (if none is left, the plan finishes). It returns [ErrNotFound] if
// no task has the key.
func (p *Producer[P]) Resume(ctx context.Context, key string) error {
	return p.rewrite(ctx, key, "resume", func(doc *taskDoc, now time.Time) (bson.D, error) {
		if !doc.Paused {
			return nil, notApplicable("resume", doc, "the task is not paused")
		}
		update, err := resumeUpdate(doc, now, p.cfg.Retention)
		if err != nil {
			return nil, fmt.Errorf("mscheduler: resume %q: %w", key, err)
		}
		return update, nil
	})
}

// rewriteTries bounds how often a rewrite reads again after a concurrent
// write.
const rewriteTries = 5

// rewrite reads the task, builds a write from what it read, and applies it
// fenced on the task's rev, reading again when a concurrent write moved the
// task. A nil write means there is nothing to do; an error from build is
// returned as it is, and nothing is written.
func (p *Producer[P]) rewrite(ctx context.Context, key, verb string, build func(doc *taskDoc, now time.Time) (bson.D, error)) error {
	for try := 0; try < rewriteTries; try++ {
		doc, err := p.read(ctx, key, verb)
		if err != nil {
			return err
		}
		update, err := build(doc, p.clock.Now())
		if err != nil || update == nil {
			return err
		}
		res, err := p.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: key}, revFence(doc.Rev)}, update)
		if err != nil {
			return fmt.Errorf("mscheduler: %s %q: %w", verb, key, err)
		}
		if res.MatchedCount > 0 {
			local.wake(namespaceOf(p.coll))
			return nil
		}
	}
	return fmt.Errorf("mscheduler: %s %q: the task kept changing; try again", verb, key)
}

// revFence matches a task still at rev; 0 also matches a document added
// by hand without one.
func revFence(rev int64) bson.E {
	if rev == 0 {
		return bson.E{Key: fRev, Value: op("$in", bson.A{0, nil})}
	}
	return bson.E{Key: fRev, Value: rev}
}

// read reads the task for an edit (without its params and runs); a
// document that does not decode is reported with the field at fault.
func (p *Producer[P]) read(ctx context.Context, key, verb string) (*taskDoc, error) {
	if err := p.clock.ensure(ctx, p.coll.Database()); err != nil {
		return nil, err
	}
	if err := p.checkSchema(ctx); err != nil {
		return nil, err
	}
	raw, err := p.coll.FindOne(ctx, bson.D{{Key: fID, Value: key}}, options.FindOne().SetProjection(bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: %s %q: %w", verb, key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: %s %q: %w", verb, key, err)
	}
	var doc taskDoc
	if err := bson.Unmarshal(raw, &doc); err != nil {
		prob := inspect(raw)
		if prob == nil {
			prob = &problem{field: "(document)", reason: err.Error()}
		}
		return nil, fmt.Errorf("mscheduler: %s %q: the document cannot be read: %w", verb, key, prob)
	}
	if doc.Key == "" {
		doc.Key = key
	}
	return &doc, nil
}

// resumeUpdate unpauses the task and, for a plan whose current planned time
// passed while no run of it was going, moves it on as a late first start
// under MissedSkip with no grace would: to the first planned time after
// now, the others skipped and counted as missed too (none left: the plan
// finishes). Pending skips are left for the claim to apply.
func resumeUpdate(doc *taskDoc, now time.Time, retention Retention) (bson.D, error) {
	set := bson.D{{Key: fUpdatedAt, Value: now}}
	inc := bson.D{{Key: fRev, Value: 1}}
	if pl := doc.Plan; pl != nil && doc.Status == StatusPending {
		s, err := pl.schedule()
		if err != nil {
			return nil, err
		}
		step := s.resumeStep(pl, doc.Running, doc.Succeeded, doc.FailedRuns, now)
		switch {
		case step.Done:
			set = append(set, bson.E{Key: fStatus, Value: StatusFinished}, bson.E{Key: fFree, Value: 0})
			if exp := retention.taskExpiry(StatusFinished, now); exp != nil {
				set = append(set, bson.E{Key: fExpireAt, Value: *exp})
			}
			inc = append(inc, bson.E{Key: pSkipped, Value: step.Skipped}, bson.E{Key: pMissedCount, Value: missedOf(step, 0)})
		case !step.Next.Equal(pl.Planned):
			set = append(set, bson.E{Key: fRunAt, Value: step.Next}, bson.E{Key: pPlanned, Value: step.Next}, bson.E{Key: pScheduled, Value: now})
			inc = append(inc, bson.E{Key: pSkipped, Value: step.Skipped}, bson.E{Key: pMissedCount, Value: missedOf(step, 0)})
		}
	}
	return bson.D{
		{Key: "$unset", Value: bson.D{{Key: fPaused, Value: ""}}},
		{Key: "$set", Value: set},
		{Key: "$inc", Value: inc},
	}, nil
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
	res, err := p.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: key}, {Key: fPlan, Value: op("$type", "object")}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: pSkipNext, Value: n}, {Key: fUpdatedAt, Value: p.clock.Now()}}},
		{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}},
	})
	if err != nil {
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, err)
	}
	if res.MatchedCount > 0 {
		return nil
	}
	n64, err := p.coll.CountDocuments(ctx, bson.D{{Key: fID, Value: key}})
	switch {
	case err != nil:
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, err)
	case n64 == 0:
		return fmt.Errorf("mscheduler: skip runs of %q: %w", key, ErrNotFound)
	}
	return invalid("key", "task %q has no plan", key)
}
