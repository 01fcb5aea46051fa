package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// TaskUpdate changes the options and metadata of an existing task. Nil
// fields are left as they are. Runs going on see the change as described
// in the README ("Edits to a running task"): worker_ids and group at their
// next ping, which revokes a run whose worker is no longer allowed; ping
// interval and worker timeout from their next ping; the rest from the next
// claim.
type TaskUpdate struct {
	Priority      *int
	Concurrency   *int
	WorkerIDs     *[]string
	Group         *string
	PingInterval  *time.Duration
	WorkerTimeout *time.Duration
	MaxRetries    *int
	RetryDelay    *time.Duration
	MaxFailedRuns *int
	Timeout       *time.Duration
	Description   *string
	Source        *string
	Tags          *[]string
}

// Update applies u to the task with the key, in one write fenced on what it
// read. An invalid change returns an *InvalidError naming the field, and
// nothing is written. Concurrency moves the free slots with it: raising it
// lets waiting workers claim (a change stream wakes them at once), lowering
// it below the runs going starts no new run and cancels none; a task that
// already has enough successes is succeeded, one that needs more is pending
// again. It returns [ErrNotFound] if no task has the key.
func (p *Producer[P]) Update(ctx context.Context, key string, u TaskUpdate) error {
	need := needs(fConcurrency, fFree, fRunning, fSucceeded, fStatus, fPlan, fPingIntervalMS, fWorkerTimeoutMS,
		stored.FMaxRetries, stored.FRetryDelayMS, fMaxFailedRuns)
	return p.rewrite(ctx, key, "update", need, func(doc *readTask, now time.Time) (bson.D, error) {
		return u.build(doc.Task, now, p.cfg.Retention)
	})
}

// build validates the update against the task as read and returns the
// write.
func (u *TaskUpdate) build(doc *taskDoc, now time.Time, retention Retention) (bson.D, error) {
	opts := taskOptions{
		Concurrency: doc.Concurrency, PingInterval: fromMS(doc.PingIntervalMS), WorkerTimeout: fromMS(doc.WorkerTimeoutMS),
		MaxRetries: doc.MaxRetries, RetryDelay: fromMS(doc.RetryDelayMS), MaxFailedRuns: doc.MaxFailedRuns,
	}
	if u.Concurrency != nil {
		opts.Concurrency = *u.Concurrency
	}
	if u.PingInterval != nil {
		opts.PingInterval = *u.PingInterval
	}
	if u.WorkerTimeout != nil {
		opts.WorkerTimeout = *u.WorkerTimeout
	}
	if u.MaxRetries != nil {
		opts.MaxRetries = *u.MaxRetries
	}
	if u.RetryDelay != nil {
		opts.RetryDelay = *u.RetryDelay
	}
	if u.MaxFailedRuns != nil {
		opts.MaxFailedRuns = *u.MaxFailedRuns
	}
	if err := u.validatePing(opts); err != nil {
		return nil, err
	}
	if err := opts.validate(""); err != nil {
		return nil, err
	}
	if err := u.validateRest(); err != nil {
		return nil, err
	}
	edit := taskstate.Edit{
		Priority: u.Priority, WorkerIDs: u.WorkerIDs, Group: u.Group, MaxRetries: u.MaxRetries, MaxFailedRuns: u.MaxFailedRuns,
		Description: u.Description, Source: u.Source, Tags: u.Tags,
		PingIntervalMS: msOf(u.PingInterval), WorkerTimeoutMS: msOf(u.WorkerTimeout), RetryDelayMS: msOf(u.RetryDelay), TimeoutMS: msOf(u.Timeout),
	}
	if u.Concurrency != nil {
		edit.Concurrency = &opts.Concurrency
	}
	update, why := edit.Apply(doc, now, retention.policy())
	if why != "" {
		return nil, invalid("Concurrency", "%s", why)
	}
	return update, nil
}

// msOf is an optional duration in stored milliseconds.
func msOf(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	v := ms(*d)
	return &v
}

// validatePing refuses ping settings that would make a lease unrenewable:
// a run going on takes them at its next ping, and with an interval not
// below the timeout its lease would lapse between two pings. The error
// names the field the update changed, and the other one.
func (u *TaskUpdate) validatePing(opts taskOptions) error {
	if opts.PingInterval <= 0 || opts.WorkerTimeout <= 0 || opts.PingInterval < opts.WorkerTimeout {
		return nil // validate reports the non-positive ones
	}
	if u.WorkerTimeout != nil && u.PingInterval == nil {
		return invalid("WorkerTimeout", "must be longer than the task's PingInterval (%s), got %s: the lease would lapse between two pings",
			opts.PingInterval, opts.WorkerTimeout)
	}
	return invalid("PingInterval", "must be shorter than WorkerTimeout (%s), got %s: the lease would lapse between two pings",
		opts.WorkerTimeout, opts.PingInterval)
}

func (u *TaskUpdate) validateRest() error {
	if u.Timeout != nil && *u.Timeout < 0 {
		return invalid("Timeout", "must not be negative, got %s", *u.Timeout)
	}
	if u.WorkerIDs != nil {
		for i, w := range *u.WorkerIDs {
			if err := ValidateWorkerID(w); err != nil {
				return invalid(fmt.Sprintf("WorkerIDs[%d]", i), "%s", err.(*InvalidError).Reason)
			}
		}
	}
	if u.Tags != nil {
		for i, tag := range *u.Tags {
			if tag == "" {
				return invalid(fmt.Sprintf("Tags[%d]", i), "must not be empty")
			}
		}
	}
	return nil
}
