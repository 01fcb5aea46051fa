package mscheduler

import "time"

// EventKind names what happened in a consumer.
type EventKind string

const (
	// EventClaimed: the worker claimed a run of a task.
	EventClaimed EventKind = "claimed"
	// EventRetried: a handler call failed and will be retried locally.
	EventRetried EventKind = "retried"
	// EventSucceeded: a run succeeded and was recorded.
	EventSucceeded EventKind = "succeeded"
	// EventFailed: a run failed after its local retries and was recorded.
	EventFailed EventKind = "failed"
	// EventExpired: this worker found another worker's run with a lapsed
	// lease, recorded it as expired and freed its slot.
	EventExpired EventKind = "expired"
	// EventReleased: the worker gave a run back on shutdown.
	EventReleased EventKind = "released"
	// EventRenewed: a ping renewed the lease of one of this worker's runs.
	EventRenewed EventKind = "renewed"
	// EventLeaseLost: a run was taken away from this worker; its handler was
	// cancelled and nothing more was written about it.
	EventLeaseLost EventKind = "lease_lost"
	// EventRevoked: a run was cancelled because its task no longer allows
	// this worker, and recorded as revoked.
	EventRevoked EventKind = "revoked"
	// EventCancelled: a run was cancelled because its task was cancelled,
	// and recorded as cancelled.
	EventCancelled EventKind = "cancelled"
	// EventAbandoned: a handler ignored its cancelled context for longer than
	// TimeoutGrace; its run was failed and its goroutine left behind (see
	// Consumer.Abandoned).
	EventAbandoned EventKind = "abandoned"
	// EventSkipped: planned times of a task were skipped at the start of an
	// occurrence (Event.Skipped says how many), under its plan's missed-run
	// policy or pending skips.
	EventSkipped EventKind = "skipped"
	// EventInvalid: a task's document was found unusable (a field of the
	// wrong type, a missing or unknown status, ...) and set to
	// StatusInvalid; Err names the key and the field. Reported once per
	// task, by the worker that found it.
	EventInvalid EventKind = "invalid"
	// EventError: a background operation failed (a claim, a ping, a write);
	// the consumer keeps going.
	EventError EventKind = "error"
)

// Event is reported to ConsumerConfig.OnEvent.
type Event struct {
	Kind     EventKind
	Key      string // the task's key, when the event is about a task
	RunID    string
	WorkerID string // the worker the run belongs to
	Attempt  int    // local attempts made, for run events
	Err      error  // the handler's or the operation's error, if any
	Skipped  int    // planned times skipped, for EventSkipped
	// Planned is the planned time of the run's occurrence, for run events
	// of a task with a plan.
	Planned time.Time
	At      time.Time
	// Duration is, for the end of a run (succeeded, failed, released,
	// revoked, cancelled), the time from the run's claim to its end.
	Duration time.Duration
	// Latency is the round trip of the command behind the event: the claim
	// for claimed, the write that ended the run for its end.
	Latency time.Duration
}
