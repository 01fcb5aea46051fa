package mscheduler

import (
	"errors"
	"fmt"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
)

var (
	// ErrNotFound is returned when no task has the given key.
	ErrNotFound = errors.New("mscheduler: task not found")
	// ErrInvalid is matched (with errors.Is) by every *InvalidError.
	ErrInvalid = errors.New("mscheduler: invalid input")
	// ErrLeaseLost is the cause of a handler's context cancellation when its
	// run was taken away: a ping matched nothing, or pings failed until the
	// lease lapsed. Nothing more is written about such a run.
	ErrLeaseLost = engine.ErrLeaseLost
	// ErrShutdown is the cause of a handler's context cancellation when the
	// consumer stops and its deadline has passed; the run is released.
	ErrShutdown = engine.ErrShutdown
	// ErrRevoked is the cause of a handler's context cancellation when the
	// task's worker_ids or group changed so that this worker may no longer
	// run it; the run is recorded as revoked.
	ErrRevoked = engine.ErrRevoked
	// ErrCancelled is the cause of a handler's context cancellation when
	// its task was cancelled (Producer.Cancel); the run is recorded as
	// cancelled.
	ErrCancelled = engine.ErrCancelled
	// ErrTimeout is matched by the error of a handler attempt that ran past
	// the task's Timeout; the error says "handler timed out after ...".
	ErrTimeout = engine.ErrTimeout
	// ErrStopped is returned by Start on a consumer that was stopped.
	ErrStopped = engine.ErrStopped
	// ErrRelease, returned by a handler (wrapped or not), gives its run back
	// unrun: it is recorded released, not failed, and not retried locally,
	// and its task may be claimed again at once, by any worker.
	ErrRelease = engine.ErrRelease
)

// InvalidError reports input that was refused before anything was written.
// Field names the offending field, as in the Go struct or the config.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("mscheduler: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for every *InvalidError.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// PanicError is the error a handler panic is recovered into.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("handler panic: %v\n%s", e.Value, e.Stack)
}

// SkipRetry wraps err so that the run fails at once, without local retries.
// Use it for errors that a retry cannot fix.
func SkipRetry(err error) error { return engine.SkipRetry(err) }

// ErrNotApplicable is matched (with errors.Is) by every *ActionError.
var ErrNotApplicable = errors.New("mscheduler: action does not apply")

// ActionError reports an action that does not apply to the task as it
// stands (a retry of a pending task, a delete of a running one); nothing
// was written.
type ActionError struct {
	Action string
	Key    string
	Status Status // the task's status when it was read
	Reason string
}

func (e *ActionError) Error() string {
	return fmt.Sprintf("mscheduler: %s %q: %s", e.Action, e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrNotApplicable) true for every *ActionError.
func (e *ActionError) Is(target error) bool { return target == ErrNotApplicable }
