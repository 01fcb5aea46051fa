package mscheduler

import "github.com/mscheduler/mscheduler/mscheduler/internal/engine"

// EventKind names what happened in a consumer.
type EventKind = engine.EventKind

const (
	// EventClaimed: the worker claimed a run of a task. The claimed
	// events of one claim all come before any of its runs' handlers is
	// called: a front end handing runs on (the HTTP gateway) knows which
	// are on their way.
	EventClaimed = engine.EventClaimed
	// EventRetried: a handler call failed and will be retried locally.
	EventRetried = engine.EventRetried
	// EventSucceeded: a run succeeded and was recorded.
	EventSucceeded = engine.EventSucceeded
	// EventFailed: a run failed after its local retries and was recorded.
	EventFailed = engine.EventFailed
	// EventExpired: this worker found another worker's run with a lapsed
	// lease, recorded it as expired and freed its slot.
	EventExpired = engine.EventExpired
	// EventReleased: the worker gave a run back on shutdown.
	EventReleased = engine.EventReleased
	// EventRenewed: a ping renewed the lease of one of this worker's runs.
	EventRenewed = engine.EventRenewed
	// EventLeaseLost: a run was taken away from this worker; its handler was
	// cancelled and nothing more was written about it.
	EventLeaseLost = engine.EventLeaseLost
	// EventRevoked: a run was cancelled because its task no longer allows
	// this worker, and recorded as revoked.
	EventRevoked = engine.EventRevoked
	// EventCancelled: a run was cancelled because its task was cancelled,
	// and recorded as cancelled.
	EventCancelled = engine.EventCancelled
	// EventAbandoned: a handler ignored its cancelled context for longer than
	// TimeoutGrace; its run was failed and its goroutine left behind (see
	// Consumer.Abandoned).
	EventAbandoned = engine.EventAbandoned
	// EventSkipped: planned times of a task were skipped at the start of an
	// occurrence (Event.Skipped says how many), under its plan's missed-run
	// policy or pending skips.
	EventSkipped = engine.EventSkipped
	// EventInvalid: a task's document was found unusable (a field of the
	// wrong type, a missing or unknown status, ...) and set to
	// StatusInvalid; Err names the key and the field. Reported once per
	// task, by the worker that found it.
	EventInvalid = engine.EventInvalid
	// EventError: a background operation failed (a claim, a ping, a write);
	// the consumer keeps going.
	EventError = engine.EventError
)

// Event is reported to ConsumerConfig.OnEvent: Kind, the task's Key and
// the RunID when it is about a task or a run, the WorkerID the run belongs
// to, the local Attempt for run events, Err (the handler's or the
// operation's error), Skipped (planned times skipped, for EventSkipped),
// Planned (the planned time of the run's occurrence, for a task with a
// plan), At, Duration (for the end of a run, from its claim to its end)
// and Latency (the round trip of the command behind the event: the claim
// for claimed, the write that ended the run for its end).
type Event = engine.Event
