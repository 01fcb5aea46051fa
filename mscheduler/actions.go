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

// Operator actions on one task. Each reads the task and applies one update
// fenced on its rev, so that it never overwrites a concurrent action or
// run end (it reads again instead). An action that does not apply to the
// task as it stands returns an *ActionError saying why, and writes
// nothing; an unknown key returns ErrNotFound.

// finalStatuses are the statuses in which a task runs no more.
var finalStatuses = []Status{StatusSucceeded, StatusFailed, StatusFinished, StatusCancelled}

func isFinal(s Status) bool {
	for _, f := range finalStatuses {
		if s == f {
			return true
		}
	}
	return false
}

func notApplicable(action string, doc *taskDoc, format string, args ...any) error {
	return &ActionError{Action: action, Key: doc.Key, Status: doc.Status, Reason: fmt.Sprintf(format, args...)}
}

// Cancel ends the task: its status becomes cancelled and no run of it
// starts again, planned times included. Runs going on are cancelled (their
// handler's context ends with cause [ErrCancelled]) and recorded as
// cancelled: at once in this process when a consumer shares the
// producer's client, through the change stream where the server has one,
// and otherwise at the run's next ping. Retry undoes it.
func (p *Producer[P]) Cancel(ctx context.Context, key string) error {
	err := p.rewrite(ctx, key, "cancel", func(doc *taskDoc, now time.Time) (bson.D, error) {
		if isFinal(doc.Status) {
			return nil, notApplicable("cancel", doc, "the task is already %s", doc.Status)
		}
		set := bson.D{{Key: fStatus, Value: StatusCancelled}, {Key: fUpdatedAt, Value: now}}
		if exp := p.cfg.Retention.taskExpiry(StatusCancelled, now); exp != nil {
			set = append(set, bson.E{Key: fExpireAt, Value: *exp})
		}
		return bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}}}, nil
	})
	if err == nil {
		local.cancel(namespaceOf(p.coll), key)
	}
	return err
}

// Retry makes a failed, cancelled or invalid task claimable now: its
// failed runs count restarts from 0, its successes so far and its history
// are kept. A task with a plan goes on from its current planned time,
// which runs now.
func (p *Producer[P]) Retry(ctx context.Context, key string) error {
	return p.rewrite(ctx, key, "retry", func(doc *taskDoc, now time.Time) (bson.D, error) {
		switch doc.Status {
		case StatusFailed, StatusCancelled, StatusInvalid:
		default:
			return nil, notApplicable("retry", doc, "only a failed, cancelled or invalid task can be retried; this one is %s", doc.Status)
		}
		status := StatusPending
		if doc.Running > 0 {
			status = StatusRunning
		}
		set := bson.D{
			{Key: fStatus, Value: status}, {Key: fFailedRuns, Value: 0}, {Key: fRunAt, Value: now},
			{Key: fFree, Value: doc.Concurrency - doc.Running - doc.Succeeded}, {Key: fUpdatedAt, Value: now},
		}
		if doc.Plan != nil {
			set = append(set, bson.E{Key: pScheduled, Value: now})
		}
		return bson.D{
			{Key: "$set", Value: set},
			{Key: "$unset", Value: bson.D{{Key: fExpireAt, Value: ""}, {Key: fInvalid, Value: ""}}},
			{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}},
		}, nil
	})
}

// RunNow makes a pending task claimable now. For a task with a plan, its
// current planned time runs now (the handler still sees it as
// Run.PlannedAt) and the planned times after it stay where they were.
func (p *Producer[P]) RunNow(ctx context.Context, key string) error {
	return p.rewrite(ctx, key, "run now", func(doc *taskDoc, now time.Time) (bson.D, error) {
		switch {
		case doc.Status != StatusPending:
			return nil, notApplicable("run now", doc, "only a pending task can be run now; this one is %s", doc.Status)
		case doc.Paused:
			return nil, notApplicable("run now", doc, "the task is paused: resume it first")
		}
		set := bson.D{{Key: fRunAt, Value: now}, {Key: fUpdatedAt, Value: now}}
		if doc.Plan != nil {
			set = append(set, bson.E{Key: pScheduled, Value: now})
		}
		return bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}}}, nil
	})
}

// DeleteOpts says how Delete treats a task with runs going.
type DeleteOpts struct {
	// Force deletes a task with runs going: it is cancelled first (as
	// Cancel does), Delete waits up to three of the task's ping intervals
	// for its runs to end and be recorded as cancelled, then deletes it (a
	// run still going then loses its lease). Without it such a delete is
	// refused.
	Force bool
}

// Delete removes the task. Its run records in the history stay until
// their retention ends.
func (p *Producer[P]) Delete(ctx context.Context, key string, opts *DeleteOpts) error {
	force := opts != nil && opts.Force
	for try := 0; try < rewriteTries; try++ {
		doc, err := p.read(ctx, key, "delete")
		if err != nil {
			return err
		}
		if doc.Running > 0 {
			if !force {
				return notApplicable("delete", doc, "%d run%s going: cancel the task first, or delete it with force", doc.Running, plural(doc.Running))
			}
			if doc, err = p.cancelAndWait(ctx, doc); err != nil {
				return err
			}
		}
		if err := p.logBeforeDelete(ctx, key); err != nil {
			return err
		}
		res, err := p.coll.DeleteOne(ctx, bson.D{{Key: fID, Value: key}, revFence(doc.Rev)})
		if err != nil {
			return fmt.Errorf("mscheduler: delete %q: %w", key, err)
		}
		if res.DeletedCount > 0 {
			return nil
		}
	}
	return fmt.Errorf("mscheduler: delete %q: the task kept changing; try again", key)
}

// logBeforeDelete writes the history records the task still marks as
// unlogged: deleting it would lose the marks.
func (p *Producer[P]) logBeforeDelete(ctx context.Context, key string) error {
	var t unloggedTask
	err := p.coll.FindOne(ctx, bson.D{{Key: fID, Value: key}, {Key: fUnlogged, Value: op("$gt", bson.D{})}},
		options.FindOne().SetProjection(bson.D{{Key: fUnlogged, Value: 1}, {Key: fRuns, Value: 1}, {Key: fInvalid, Value: 1}})).Decode(&t)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mscheduler: delete %q: %w", key, err)
	}
	_, err = writeUnloggedOf(ctx, p.coll, []unloggedTask{t}, p.cfg.Retention, p.clock.Now())
	return err
}

// cancelAndWait cancels a task with runs going and waits, up to three ping
// intervals, for them to end; it returns the task as last read.
func (p *Producer[P]) cancelAndWait(ctx context.Context, doc *taskDoc) (*taskDoc, error) {
	if err := p.Cancel(ctx, doc.Key); err != nil && !isNotApplicable(err) {
		return nil, err
	}
	deadline := time.Now().Add(3 * fromMS(max(doc.PingIntervalMS, 100)))
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		d, err := p.read(ctx, doc.Key, "delete")
		if err != nil || d.Running == 0 || time.Now().After(deadline) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// deleteBatch bounds the tasks DeleteFinished removes per command.
const deleteBatch = 500

// DeleteFinished removes the tasks that finished (succeeded, failed,
// finished or cancelled) more than olderThan ago, in batches of
// deleteBatch, and returns how many it removed.
func (p *Producer[P]) DeleteFinished(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("olderThan", "must not be negative, got %s", olderThan)
	}
	if err := p.clock.ensure(ctx, p.coll.Database()); err != nil {
		return 0, err
	}
	filter := bson.D{{Key: fStatus, Value: op("$in", finalStatuses)}, {Key: fUpdatedAt, Value: op("$lt", p.clock.Now().Add(-olderThan))}, allLogged}
	return deleteInBatches(ctx, p.coll, filter)
}

// deleteInBatches deletes what filter selects, a batch of ids at a time,
// each delete fenced on the filter still holding.
func deleteInBatches(ctx context.Context, coll *mongo.Collection, filter bson.D) (int64, error) {
	var total int64
	for {
		n, err := deleteBatchOnce(ctx, coll, filter)
		total += n
		if err != nil || n < deleteBatch {
			return total, err
		}
	}
}

// deleteBatchOnce deletes up to deleteBatch documents that filter selects.
func deleteBatchOnce(ctx context.Context, coll *mongo.Collection, filter bson.D) (int64, error) {
	cur, err := coll.Find(ctx, filter, options.Find().SetLimit(deleteBatch).SetProjection(bson.D{{Key: fID, Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	var ids []struct {
		ID bson.RawValue `bson:"_id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id.ID
	}
	res, err := coll.DeleteMany(ctx, append(bson.D{{Key: fID, Value: op("$in", in)}}, filter...))
	if err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	return res.DeletedCount, nil
}

func isNotApplicable(err error) bool { return errors.Is(err, ErrNotApplicable) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
