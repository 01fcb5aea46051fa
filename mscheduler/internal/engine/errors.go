package engine

import "errors"

// The causes of a handler's context cancellation and the errors of a
// consumer's lifecycle; mscheduler exports each under the same name and
// documents it.
var (
	ErrLeaseLost = errors.New("mscheduler: lease lost")
	ErrShutdown  = errors.New("mscheduler: consumer shutting down")
	ErrRevoked   = errors.New("mscheduler: run revoked: this worker is no longer allowed to run the task")
	ErrCancelled = errors.New("mscheduler: task cancelled")
	ErrTimeout   = errors.New("mscheduler: handler timed out")
	ErrStopped   = errors.New("mscheduler: consumer stopped")
	ErrRelease   = errors.New("mscheduler: run released by its handler")
)

// SkipRetry wraps err so that the run fails at once, without local retries.
func SkipRetry(err error) error { return &skipRetryError{err: err} }

type skipRetryError struct{ err error }

func (e *skipRetryError) Error() string { return e.err.Error() }
func (e *skipRetryError) Unwrap() error { return e.err }

// isSkipRetry says a handler's error is not to be retried locally.
func isSkipRetry(err error) bool {
	var s *skipRetryError
	return errors.As(err, &s) || errors.Is(err, ErrRelease)
}
