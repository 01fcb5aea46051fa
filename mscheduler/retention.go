package mscheduler

import (
	"cmp"
	"time"
)

// Retention defaults, in the spirit of River's: finished work is kept a
// day, failures a week for a person to look into.
const (
	RetentionSucceededDefault = 24 * time.Hour
	RetentionFailedDefault    = 7 * 24 * time.Hour
)

// KeepForever is a Retention duration that never deletes.
const KeepForever time.Duration = -1

// fExpireAt is when a finished task, or a run record, may be deleted.
const fExpireAt = "expire_at"

// Retention says how long finished tasks and run records are kept before
// they are deleted (by a TTL index where the server has them, else by the
// worker holding the maintenance lease). A zero field takes its default;
// [KeepForever] keeps them.
type Retention struct {
	// Succeeded is for succeeded and finished tasks, and succeeded runs.
	// Defaults to [RetentionSucceededDefault].
	Succeeded time.Duration
	// Failed is for failed and cancelled tasks, and runs of every other
	// outcome. Defaults to [RetentionFailedDefault].
	Failed time.Duration
}

func (r Retention) withDefaults() Retention {
	r.Succeeded = cmp.Or(r.Succeeded, RetentionSucceededDefault)
	r.Failed = cmp.Or(r.Failed, RetentionFailedDefault)
	return r
}

func (r Retention) validate(prefix string) error {
	switch {
	case r.Succeeded < 0 && r.Succeeded != KeepForever:
		return invalid(prefix+"Succeeded", "must be positive or KeepForever, got %s", r.Succeeded)
	case r.Failed < 0 && r.Failed != KeepForever:
		return invalid(prefix+"Failed", "must be positive or KeepForever, got %s", r.Failed)
	}
	return nil
}

// taskExpiry is when a task that reached status at now may be deleted; nil
// for a status that is not final, or kept forever.
func (r Retention) taskExpiry(status Status, now time.Time) *time.Time {
	switch status {
	case StatusSucceeded, StatusFinished:
		return expiry(r.Succeeded, now)
	case StatusFailed, StatusCancelled:
		return expiry(r.Failed, now)
	}
	return nil
}

// runExpiry is when a run record that ended with outcome at now may be
// deleted; nil when kept forever.
func (r Retention) runExpiry(outcome Outcome, now time.Time) *time.Time {
	if outcome == OutcomeSucceeded {
		return expiry(r.Succeeded, now)
	}
	return expiry(r.Failed, now)
}

func expiry(keep time.Duration, now time.Time) *time.Time {
	if keep == KeepForever {
		return nil
	}
	t := now.Add(keep)
	return &t
}
