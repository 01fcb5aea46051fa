package mscheduler

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Status is the state of a task, stored as a string in the task document.
type Status = stored.Status

const (
	// StatusPending: the task has capacity left and no run is going.
	StatusPending = stored.StatusPending
	// StatusRunning: at least one worker holds a run of the task.
	StatusRunning = stored.StatusRunning
	// StatusSucceeded: the task has as many successful runs as its concurrency.
	StatusSucceeded = stored.StatusSucceeded
	// StatusFailed: the task's failed runs reached its MaxFailedRuns.
	StatusFailed = stored.StatusFailed
	// StatusFinished: the task's plan has no planned time left.
	StatusFinished = stored.StatusFinished
	// StatusCancelled: the task was cancelled (Producer.Cancel); it runs no
	// more, and its runs going on were cancelled. Retry makes it pending.
	StatusCancelled = stored.StatusCancelled
	// StatusInvalid: the task's document cannot be run as stored (it was
	// edited by hand into a shape the library cannot use); its invalid
	// field says which field is wrong and why. Workers skip it until a
	// person repairs the field and sets the status back to pending.
	StatusInvalid = stored.StatusInvalid
)

// Outcome is how one run ended, stored in the run records of a task.
type Outcome = stored.Outcome

const (
	// OutcomeSucceeded: the handler returned no error.
	OutcomeSucceeded = stored.OutcomeSucceeded
	// OutcomeFailed: the handler failed on its last local attempt.
	OutcomeFailed = stored.OutcomeFailed
	// OutcomeExpired: the worker stopped pinging and its lease lapsed; another
	// worker recorded the run as expired and freed its slot.
	OutcomeExpired = stored.OutcomeExpired
	// OutcomeReleased: the worker gave the run back on shutdown, before it ended.
	OutcomeReleased = stored.OutcomeReleased
	// OutcomeCancelled: the task was cancelled while the run went on; its
	// handler's context was cancelled (cause ErrCancelled). It does not
	// count as a failure.
	OutcomeCancelled = stored.OutcomeCancelled
	// OutcomeRevoked: the task stopped allowing the worker (worker_ids or
	// group changed) while the run was going; the run was cancelled at its
	// next ping and its slot given back. It does not count as a failure.
	OutcomeRevoked = stored.OutcomeRevoked
	// OutcomeUnknown: the run's history record was written after its task
	// no longer kept the run's record (more runs ended meanwhile than
	// RunsKept); only its id and task are known. The real record, if it
	// comes later, replaces it.
	OutcomeUnknown = stored.OutcomeUnknown
)

// Defaults of the task options. A zero option in a published [Task] takes the
// producer's default, which itself defaults to these.
const (
	ConcurrencyDefault   = 1
	PingIntervalDefault  = 10 * time.Second
	WorkerTimeoutDefault = 30 * time.Second
	MaxRetriesDefault    = 2
	RetryDelayDefault    = time.Second
	MaxFailedRunsDefault = 3
)

// NoRetries is the MaxRetries value for a task whose failures are not retried
// locally: a failed handler call fails the run at once.
const NoRetries = -1

// Limits on what a task may hold.
const (
	// MaxKeyBytes is the longest key accepted.
	MaxKeyBytes = 1024
	// RetryDelayMax caps the exponential backoff between local retries.
	RetryDelayMax = engine.RetryDelayMax
	// MaxParamsBytes is the largest encoded Params accepted. With the run
	// records capped (see RunsBudgetBytes), it keeps every task document
	// below MongoDB's 16 MiB limit.
	MaxParamsBytes = 8 << 20
	// MaxHeadersBytes bounds a task's Headers, keys and values together:
	// they are context such as a trace id, not data.
	MaxHeadersBytes = 8 << 10
)

// Task is a unit of work: what a producer publishes, and what a handler
// receives. P is the type of the parameters, stored in the document as BSON.
//
// Every option left at its zero value takes the producer's default.
type Task[P any] struct {
	// Key is the caller's unique id for the task. Publishing is idempotent by
	// key. Required, at most [MaxKeyBytes] bytes.
	Key string
	// Params are the task's parameters, encoded with the BSON codec.
	Params P

	// Priority orders claimable tasks: higher first, ties by RunAt.
	// Defaults to 0.
	Priority int
	// RunAt is the earliest time the task may start. Defaults to the time the
	// server receives the task.
	RunAt time.Time
	// Concurrency is the number of successful runs that complete the task; at
	// most this many run at once, and a worker never holds two runs of one
	// task at the same time. Defaults to [ConcurrencyDefault].
	Concurrency int
	// DistinctWorkers lets each worker count only once towards Concurrency:
	// the task is dispatched to Concurrency different workers.
	DistinctWorkers bool
	// WorkerIDs, when not empty, is the allow-list of workers that may run the
	// task.
	WorkerIDs []string
	// Group, when not empty, limits the task to workers that declare this
	// group.
	Group string
	// PingInterval is how often a worker running the task renews its lease.
	// Must be shorter than WorkerTimeout. Defaults to [PingIntervalDefault].
	PingInterval time.Duration
	// WorkerTimeout is the lease length: a run not pinged for this long is
	// dead, and another worker may take its slot. Defaults to
	// [WorkerTimeoutDefault].
	WorkerTimeout time.Duration
	// MaxRetries is the number of local retries by the same worker after a
	// handler error, before the run is failed. [NoRetries] disables them.
	// Defaults to [MaxRetriesDefault].
	MaxRetries int
	// RetryDelay is the delay before the first local retry; it doubles on
	// each further retry, with ±20% jitter, up to [RetryDelayMax]. A failed
	// run also delays the task by the same backoff before another worker may
	// try it. Defaults to [RetryDelayDefault].
	RetryDelay time.Duration
	// MaxFailedRuns is the number of failed runs after which the task is
	// failed. Defaults to [MaxFailedRunsDefault].
	MaxFailedRuns int
	// Timeout bounds each handler attempt: the handler's context carries the
	// deadline, and an attempt still going at it fails ([ErrTimeout]) and is
	// retried locally like any error. It is independent of WorkerTimeout,
	// which only detects dead workers: pings go on while a handler runs
	// within its Timeout. Defaults to the consumer's Timeout.
	Timeout time.Duration

	// Description says what the task is, for people reading the collection.
	Description string
	// Source says who published the task. Defaults to the producer's Source.
	Source string
	// Tags are free labels for filtering.
	Tags []string
	// Headers carry context from the publisher to the handler, such as W3C
	// trace context (traceparent, tracestate) or a request id: stored with
	// the task, and handed unchanged to the handler and to each
	// [Middleware] in [Attempt]. [ProducerConfig].ContextHeaders adds
	// headers from the publishing context. Keys are non-empty, without '.'
	// and not starting with '$'; keys and values together are at most
	// [MaxHeadersBytes].
	Headers map[string]string

	// Plan, when set, makes the task recurring: each planned time is an
	// occurrence that completes like a plain task (Concurrency successes, or
	// MaxFailedRuns failed runs), after which the task moves to the next
	// planned time. RunAt must be zero: the plan sets it.
	Plan *Plan

	// Run describes the run a handler executes; nil when publishing.
	Run *Run
}

// Run describes one run of a task, as seen by the handler executing it:
// its ID (every write about the run is fenced on it), the WorkerID
// executing it, the local Attempt number from 1, StartedAt (when the run
// was claimed, in server time), PlannedAt (the planned time of the
// occurrence it belongs to, for a task with a plan; zero otherwise), and
// the task's Status, Succeeded and FailedRuns right after the claim.
type Run = engine.Run
