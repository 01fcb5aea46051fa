package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Operator actions on one task. Each reads the task and applies one update
// fenced on its rev, so that it never overwrites a concurrent action or
// run end (it reads again instead). An action that does not apply to the
// task as it stands returns an *ActionError saying why, and writes
// nothing; an unknown key returns ErrNotFound.

// finalStatuses are the statuses in which a task runs no more.
var finalStatuses = []Status{StatusSucceeded, StatusFailed, StatusFinished, StatusCancelled}

func isFinal(s Status) bool { return s.Final() }

func notApplicable(action string, doc *taskDoc, format string, args ...any) error {
	return &ActionError{Action: action, Key: doc.Key, Status: doc.Status, Reason: fmt.Sprintf(format, args...)}
}

// Condition is what an action asks of the task before it applies, made by
// [IfUnchanged]. A task that does not meet it is left as it is, and the
// action returns an *ActionError saying why.
type Condition struct {
	rev       int64
	updatedAt time.Time
}

// IfUnchanged applies an action only to a task that did not change since
// it was read with rev and updatedAt ([TaskInfo.Rev] and UpdatedAt): not
// claimed, ended, acted on, updated or republished since. A page that
// lists tasks passes what it showed of each, so that acting from it later
// never acts on a task it did not show, even one back in the same status.
func IfUnchanged(rev int64, updatedAt time.Time) Condition {
	return Condition{rev: rev, updatedAt: updatedAt}
}

// unmet refuses the action when the task as read does not meet one of
// conds; nil when it meets them all.
func unmet(action string, doc *readTask, conds []Condition) error {
	for _, c := range conds {
		if doc.Rev != c.rev || !doc.UpdatedAt.Equal(c.updatedAt) {
			return notApplicable(action, doc.Task, "it changed since it was read: rev %d, updated %s then; rev %d, updated %s now",
				c.rev, instantText(c.updatedAt), doc.Rev, instantText(doc.UpdatedAt))
		}
	}
	return nil
}

func instantText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// holding is build for a task that meets conds, checked on each read.
func holding(action string, conds []Condition, build func(*readTask, time.Time) (bson.D, error)) func(*readTask, time.Time) (bson.D, error) {
	return func(doc *readTask, now time.Time) (bson.D, error) {
		if err := unmet(action, doc, conds); err != nil {
			return nil, err
		}
		return build(doc, now)
	}
}

// Cancel ends the task: its status becomes cancelled and no run of it
// starts again, planned times included. Runs going on are cancelled (their
// handler's context ends with cause [ErrCancelled]) and recorded as
// cancelled: at once in this process when a consumer shares the
// producer's client, through the change stream where the server has one,
// and otherwise at the run's next ping. Retry undoes it. Given conds
// ([IfUnchanged]), it cancels only a task that meets them.
func (p *Producer[P]) Cancel(ctx context.Context, key string, conds ...Condition) error {
	return p.cancel(ctx, key, needs(fStatus, fRunning, fHolders), conds)
}

// cancel is Cancel refused only when a field in need cannot be read.
func (p *Producer[P]) cancel(ctx context.Context, key string, need func(string) bool, conds []Condition) error {
	err := p.rewrite(ctx, key, "cancel", need, holding("cancel", conds, func(doc *readTask, now time.Time) (bson.D, error) {
		update, why := taskstate.Cancel(doc.Task, now, p.cfg.Retention.policy())
		if why != "" {
			return nil, notApplicable("cancel", doc.Task, "%s", why)
		}
		return update, nil
	}))
	if err == nil {
		localwake.Cancel(p.coll, key)
	}
	return err
}

// Retry makes a failed, cancelled or invalid task claimable now: its
// failed runs count restarts from 0, its successes so far and its history
// are kept. A task with a plan goes on from its current planned time,
// which runs now. A task that has as many successes as its concurrency
// has nothing left to run: Retry refuses it (publish it again with
// ResetFinished). Given conds ([IfUnchanged]), it retries only a task that
// meets them.
func (p *Producer[P]) Retry(ctx context.Context, key string, conds ...Condition) error {
	need := needs(fStatus, fRunning, fHolders, fConcurrency, fSucceeded, fPlan)
	return p.rewrite(ctx, key, "retry", need, holding("retry", conds, func(doc *readTask, now time.Time) (bson.D, error) {
		update, why := taskstate.Retry(doc.Task, now, p.cfg.Retention.policy())
		if why != "" {
			return nil, notApplicable("retry", doc.Task, "%s", why)
		}
		return update, nil
	}))
}

// RunNow makes a pending task claimable now. For a task with a plan, its
// current planned time runs now (the handler still sees it as
// Run.PlannedAt) and the planned times after it stay where they were.
func (p *Producer[P]) RunNow(ctx context.Context, key string) error {
	return p.rewrite(ctx, key, "run now", needs(fStatus, fPaused, fPlan), func(doc *readTask, now time.Time) (bson.D, error) {
		update, why := taskstate.RunNow(doc.Task, now)
		if why != "" {
			return nil, notApplicable("run now", doc.Task, "%s", why)
		}
		return update, nil
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
// their retention ends. It reads only what it needs of the task (whether
// runs are going, and its rev and updated_at to fence on), so a task
// edited out of shape can always be deleted. Given conds ([IfUnchanged]), it deletes only a
// task that meets them; a forced delete checks them before it cancels.
func (p *Producer[P]) Delete(ctx context.Context, key string, opts *DeleteOpts, conds ...Condition) error {
	force := opts != nil && opts.Force
	need := needs(fRunning, fHolders)
	if force {
		need = needs() // nothing stops a forced delete
	}
	for try := 0; try < rewriteTries; try++ {
		doc, err := p.read(ctx, key, "delete", need)
		if err != nil {
			return err
		}
		if err := unmet("delete", doc, conds); err != nil {
			return err
		}
		if doc.Running > 0 || len(doc.Holders) > 0 {
			if !force {
				return notApplicable("delete", doc.Task, "%d run%s going: cancel the task first, or delete it with force", doc.Running, plural(doc.Running))
			}
			if doc, err = p.cancelAndWait(ctx, doc, conds); err != nil {
				return err
			}
			conds = nil // met by the cancel, which moved the task
		}
		if err := p.logBeforeDelete(ctx, doc.RawID); err != nil {
			return err
		}
		res, err := p.coll.DeleteOne(ctx, doc.fence())
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
func (p *Producer[P]) logBeforeDelete(ctx context.Context, id bson.RawValue) error {
	raw, err := p.coll.FindOne(ctx, append(taskstate.ByID(id), bson.E{Key: fUnlogged, Value: op("$gt", bson.D{})}),
		options.FindOne().SetProjection(history.MarksProjection)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mscheduler: delete %q: %w", stored.IDString(id), err)
	}
	_, err = history.WriteMarked(ctx, p.coll, []bson.Raw{raw}, p.cfg.Retention.policy(), p.clock.Now(), 0)
	return err
}

// cancelAndWait cancels a task with runs going, still as read when conds
// say so, and waits, up to three ping intervals, for them to end; it
// returns the task as last read.
func (p *Producer[P]) cancelAndWait(ctx context.Context, doc *readTask, conds []Condition) (*readTask, error) {
	// A task already final (cancelled while its runs go on) has only their
	// ends to wait for. Whatever the document holds, nothing else stops a
	// forced delete: a cancel refused as not applicable means the task
	// became final meanwhile, unless conds refused it.
	if !isFinal(doc.Status) {
		if err := p.cancel(ctx, doc.Key, needs(), conds); err != nil && (len(conds) > 0 || !isNotApplicable(err)) {
			return nil, err
		}
	}
	deadline := time.Now().Add(3 * fromMS(min(max(doc.PingIntervalMS, 100), 60_000)))
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		d, err := p.read(ctx, doc.Key, "delete", needs())
		if err != nil || d.Running == 0 && len(d.Holders) == 0 || time.Now().After(deadline) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// DeleteFinished removes the tasks that finished (succeeded, failed,
// finished or cancelled) more than olderThan ago, in batches of
// query.DeleteBatch, and returns how many it removed.
func (p *Producer[P]) DeleteFinished(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("olderThan", "must not be negative, got %s", olderThan)
	}
	if err := p.checkSchema(ctx); err != nil {
		return 0, err
	}
	if err := p.clock.Ensure(ctx, p.coll.Database()); err != nil {
		return 0, err
	}
	return query.DeleteAll(ctx, p.coll, taskstate.FinishedBefore(p.clock.Now().Add(-olderThan)), -1)
}

func isNotApplicable(err error) bool { return errors.Is(err, ErrNotApplicable) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
