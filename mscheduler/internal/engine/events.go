package engine

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// EventKind names what happened in a consumer. The public package
// documents each kind (mscheduler.EventKind).
type EventKind string

// The kinds of events; see mscheduler's documentation of each.
const (
	EventClaimed   EventKind = "claimed"
	EventRetried   EventKind = "retried"
	EventSucceeded EventKind = "succeeded"
	EventFailed    EventKind = "failed"
	EventExpired   EventKind = "expired"
	EventReleased  EventKind = "released"
	EventRenewed   EventKind = "renewed"
	EventLeaseLost EventKind = "lease_lost"
	EventRevoked   EventKind = "revoked"
	EventCancelled EventKind = "cancelled"
	EventAbandoned EventKind = "abandoned"
	EventSkipped   EventKind = "skipped"
	EventInvalid   EventKind = "invalid"
	EventError     EventKind = "error"
)

// Event is reported to Config.OnEvent.
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

// Run describes one run of a task, as seen by the handler executing it
// (mscheduler.Run).
type Run struct {
	ID         string        // every write about the run is fenced on it
	WorkerID   string        // the worker executing the run
	Attempt    int           // the local attempt number, from 1
	StartedAt  time.Time     // when the run was claimed, in server time
	PlannedAt  time.Time     // the planned time of its occurrence, for a task with a plan
	Status     stored.Status // Status, Succeeded and FailedRuns: the task's state right after the claim
	Succeeded  int
	FailedRuns int
}
