package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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
	return p.rewrite(ctx, key, "update", func(doc *taskDoc, now time.Time) (bson.D, error) {
		return u.build(doc, now, p.cfg.Retention)
	})
}

// build validates the update against the task as read and returns the
// write.
func (u *TaskUpdate) build(doc *taskDoc, now time.Time, retention Retention) (bson.D, error) {
	opts := taskOptions{
		Concurrency: doc.Concurrency, PingInterval: fromMS(doc.PingIntervalMS), WorkerTimeout: fromMS(doc.WorkerTimeoutMS),
		MaxRetries: doc.MaxRetries, RetryDelay: fromMS(doc.RetryDelayMS), MaxFailedRuns: doc.MaxFailedRuns,
	}
	set := bson.D{{Key: fUpdatedAt, Value: now}}
	setIf := func(changed bool, field string, value any) {
		if changed {
			set = append(set, bson.E{Key: field, Value: value})
		}
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
	setIf(u.Priority != nil, fPriority, deref(u.Priority))
	setIf(u.PingInterval != nil, fPingIntervalMS, ms(opts.PingInterval))
	setIf(u.WorkerTimeout != nil, fWorkerTimeoutMS, ms(opts.WorkerTimeout))
	setIf(u.MaxRetries != nil, fMaxRetries, opts.MaxRetries)
	setIf(u.RetryDelay != nil, fRetryDelayMS, ms(opts.RetryDelay))
	setIf(u.MaxFailedRuns != nil, fMaxFailedRuns, opts.MaxFailedRuns)
	setIf(u.Timeout != nil, fTimeoutMS, ms(deref(u.Timeout)))
	setIf(u.WorkerIDs != nil, fWorkerIDs, deref(u.WorkerIDs))
	setIf(u.Group != nil, fGroup, deref(u.Group))
	setIf(u.Description != nil, fDescription, deref(u.Description))
	setIf(u.Source != nil, fSource, deref(u.Source))
	setIf(u.Tags != nil, fTags, deref(u.Tags))
	inc := bson.D{{Key: fRev, Value: 1}}
	var unset bson.D
	if delta := opts.Concurrency - doc.Concurrency; delta != 0 {
		if doc.Plan != nil && opts.Concurrency < doc.Succeeded {
			return nil, invalid("Concurrency", "must not be below the %d successes of the plan's current occurrence, got %d", doc.Succeeded, opts.Concurrency)
		}
		set = append(set, bson.E{Key: fConcurrency, Value: opts.Concurrency})
		inc = append(inc, bson.E{Key: fFree, Value: delta})
		if status := statusAfterResize(doc, doc.Free+delta); status != "" {
			set = append(set, bson.E{Key: fStatus, Value: status})
			if exp := retention.taskExpiry(status, now); exp != nil {
				set = append(set, bson.E{Key: fExpireAt, Value: *exp})
			} else {
				unset = bson.D{{Key: fExpireAt, Value: ""}}
			}
		}
	}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: inc}}
	if unset != nil {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	return update, nil
}

// statusAfterResize is the status a concurrency change implies for a task
// with no run going: succeeded when it has enough successes, pending when
// it needs more. Running tasks settle at their runs' ends.
func statusAfterResize(doc *taskDoc, free int) Status {
	switch {
	case doc.Running > 0 || doc.Plan != nil:
		return ""
	case doc.Status == StatusSucceeded && free > 0:
		return StatusPending
	case doc.Status == StatusPending && free <= 0:
		return StatusSucceeded
	}
	return ""
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

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
