package mscheduler

import (
	"cmp"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Retention defaults, in the spirit of River's: finished work is kept a
// day, failures a week for a person to look into.
const (
	RetentionSucceededDefault = 24 * time.Hour
	RetentionFailedDefault    = 7 * 24 * time.Hour
)

// KeepForever is a Retention duration that never deletes.
const KeepForever = taskstate.KeepForever

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

// policy is the retention as the owner of a task's state applies it.
func (r Retention) policy() taskstate.Retention {
	return taskstate.Retention{Succeeded: r.Succeeded, Failed: r.Failed}
}
