package stored

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Status is the state of a task, stored as a string.
type Status string

// The statuses the library writes. Their meaning is documented where the
// public package names them.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusFinished  Status = "finished"
	StatusCancelled Status = "cancelled"
	StatusInvalid   Status = "invalid"
)

// Statuses are every status the library writes.
var Statuses = []Status{StatusPending, StatusRunning, StatusSucceeded, StatusFailed, StatusFinished, StatusCancelled, StatusInvalid}

// Known says the library writes s.
func (s Status) Known() bool {
	for _, k := range Statuses {
		if s == k {
			return true
		}
	}
	return false
}

// Final says a task in status s runs no more, unless a person or an action
// (Retry, a publish that resets it) makes it pending again.
func (s Status) Final() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusFinished || s == StatusCancelled
}

// Claimable says a task in status s may have a free slot.
func (s Status) Claimable() bool { return s == StatusPending || s == StatusRunning }

// Outcome is how one run ended, stored in its run record.
type Outcome string

// The outcomes of a run; documented where the public package names them.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeExpired   Outcome = "expired"
	OutcomeReleased  Outcome = "released"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeRevoked   Outcome = "revoked"
	// OutcomeUnknown is the outcome of a history record written for a run
	// whose record its task no longer kept: it yields to the real record.
	OutcomeUnknown Outcome = "unknown"
)

// Counted says the outcome counts towards the task's max_failed_runs.
func (o Outcome) Counted() bool { return o == OutcomeFailed || o == OutcomeExpired }

// Task is the stored form of a task. The counters free, running,
// succeeded and failed_runs are kept by every claim and run end so that
// queries need no $expr: free = concurrency - running - succeeded.
type Task struct {
	ID              string            `bson:"_id"`
	Key             string            `bson:"key"`
	Schema          int               `bson:"schema"`
	Params          bson.RawValue     `bson:"params"`
	Status          Status            `bson:"status"`
	Priority        int               `bson:"priority"`
	RunAt           time.Time         `bson:"run_at"`
	Concurrency     int               `bson:"concurrency"`
	DistinctWorkers bool              `bson:"distinct_workers"`
	WorkerIDs       []string          `bson:"worker_ids,omitempty"`
	Group           string            `bson:"group,omitempty"`
	PingIntervalMS  int64             `bson:"ping_interval_ms"`
	WorkerTimeoutMS int64             `bson:"worker_timeout_ms"`
	MaxRetries      int               `bson:"max_retries"`
	RetryDelayMS    int64             `bson:"retry_delay_ms"`
	MaxFailedRuns   int               `bson:"max_failed_runs"`
	TimeoutMS       int64             `bson:"timeout_ms,omitempty"`
	Free            int               `bson:"free"`
	Running         int               `bson:"running"`
	Succeeded       int               `bson:"succeeded"`
	FailedRuns      int               `bson:"failed_runs"`
	Holders         map[string]Holder `bson:"holders,omitempty"`
	DoneBy          []string          `bson:"done_by,omitempty"`
	NextExpiry      *time.Time        `bson:"next_expiry,omitempty"`
	Rev             int64             `bson:"rev"`
	CreatedAt       time.Time         `bson:"created_at"`
	UpdatedAt       time.Time         `bson:"updated_at"`
	Description     string            `bson:"description,omitempty"`
	Source          string            `bson:"source,omitempty"`
	Tags            []string          `bson:"tags,omitempty"`
	Headers         map[string]string `bson:"headers,omitempty"`
	Plan            *Plan             `bson:"plan,omitempty"`
	Paused          bool              `bson:"paused,omitempty"`
	Invalid         *InvalidNote      `bson:"invalid,omitempty"`
	ExpireAt        *time.Time        `bson:"expire_at,omitempty"` // a finished task's end of retention
	// Unlogged maps the ended runs whose history record may not be
	// written yet to their finish time.
	Unlogged map[string]time.Time `bson:"unlogged,omitempty"`
	// runs, the finished runs, is only ever appended to ($push) and read
	// apart (see Runs): a hand edit of an old run record must not stop
	// the task.

	// RawID is the _id as read, whatever its type: every write that
	// follows a read of the task is fenced on it. Set by the decoders of
	// this package; never stored.
	RawID bson.RawValue `bson:"-"`
}

// Holder is a run in progress, stored under holders.<worker id>: a worker
// holds at most one run of a task at a time.
type Holder struct {
	Run        string    `bson:"run"`
	Started    time.Time `bson:"started"`
	LeaseUntil time.Time `bson:"lease_until"`
	// Attempt is the run's local attempt, as of its last ping.
	Attempt int `bson:"attempt,omitempty"`
	// LeaseMS, when set, is the lease the run was last claimed or renewed
	// by, in place of a shorter worker_timeout_ms: the holder's server
	// answered too slowly for its claim and first ping, or its pings, to
	// fit in the task's own (see taskstate.EffectiveLease). A renewal at
	// the worker timeout removes it.
	LeaseMS int64 `bson:"lease_ms,omitempty"`
}

// RunRecord is a finished run, appended to the task's runs (the most
// recent are kept) and written to the history collection.
type RunRecord struct {
	RunID      string        `bson:"run_id"`
	WorkerID   string        `bson:"worker_id"`
	Started    time.Time     `bson:"started"`
	LeaseUntil time.Time     `bson:"lease_until"`
	Finished   time.Time     `bson:"finished"`
	Outcome    Outcome       `bson:"outcome"`
	Attempts   int           `bson:"attempts"`
	Error      string        `bson:"error,omitempty"`
	Result     bson.RawValue `bson:"result,omitempty"`
	Planned    *time.Time    `bson:"planned,omitempty"` // of a planned task
	// LeaseMS is the run's lease when it was longer than the task's
	// worker timeout (see Holder.LeaseMS).
	LeaseMS int64 `bson:"lease_ms,omitempty"`
}

// InvalidNote is stored under invalid when a task is set to
// StatusInvalid, so that a person finds every broken task, and why, with
// one query: db.tasks.find({status: "invalid"}, {invalid: 1}).
type InvalidNote struct {
	// Reason names the field and what is wrong with it.
	Reason string `bson:"reason"`
	// Field is the stored field at fault, when one is.
	Field string `bson:"field,omitempty"`
	// Found says when the problem showed: claim, run end, sweep or check.
	Found    string    `bson:"found"`
	At       time.Time `bson:"at"`
	WorkerID string    `bson:"worker_id"`
	// Was is the status the task had before.
	Was bson.RawValue `bson:"was,omitempty"`
	// Run is the run that was going when the task was set invalid: its
	// end could not be recorded as usual.
	Run *RunRecord `bson:"run,omitempty"`
}

// Plan is the stored form of a task's plan: its definition, readable and
// editable in a database browser, and where it stands.
type Plan struct {
	Kind    string     `bson:"kind"`
	At      *time.Time `bson:"at,omitempty"`
	Every   int        `bson:"every,omitempty"`
	Unit    string     `bson:"unit,omitempty"`
	Weekday *int       `bson:"weekday,omitempty"`
	Day     *int       `bson:"day,omitempty"`
	Time    string     `bson:"time,omitempty"` // HH:MM:SS
	Cron    string     `bson:"cron,omitempty"`
	Zone    string     `bson:"zone,omitempty"`
	Repeat  int        `bson:"repeat"`
	Start   *time.Time `bson:"start,omitempty"`
	End     *time.Time `bson:"end,omitempty"`
	Missed  string     `bson:"missed"`
	Overrun string     `bson:"overrun,omitempty"`
	GraceMS int64      `bson:"grace_ms,omitempty"`

	// Planned is the planned time of the task's current occurrence: the
	// one its runs belong to, and the time its handler receives.
	Planned time.Time `bson:"planned,omitempty"`
	// Scheduled is when the task moved to Planned. A run that starts soon
	// after max(Planned, Scheduled) is on time, even if Planned is long
	// past (a queued overrun, a catch-up).
	Scheduled time.Time `bson:"scheduled,omitempty"`
	// Started says a run of the current occurrence has begun (and ended
	// without completing it, released say): the occurrence is completed
	// however late, never judged as missed.
	Started bool `bson:"started,omitempty"`
	// Runs counts the occurrences that ran, Skipped the planned times that
	// did not, and MissedCount those of the skipped ones that were missed
	// (came and went without a run) rather than skipped on request
	// (skip_next). A document written before missed_count has none: 0.
	Runs        int `bson:"runs"`
	Skipped     int `bson:"skipped"`
	MissedCount int `bson:"missed_count"`
	SkipNext    int `bson:"skip_next"`
}

// Planned is the planned time of the task's current occurrence, nil for a
// task without a plan.
func (t *Task) Planned() *time.Time {
	if t.Plan == nil {
		return nil
	}
	p := t.Plan.Planned
	return &p
}

// MS is d in whole milliseconds, as durations are stored.
func MS(d time.Duration) int64 { return d.Milliseconds() }

// FromMS is a stored duration in milliseconds, saturated: a huge value
// edited by hand must not overflow into a negative duration.
func FromMS(v int64) time.Duration {
	const most = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case v > most:
		return time.Duration(1<<63 - 1)
	case v < -most:
		return -time.Duration(1<<63 - 1)
	}
	return time.Duration(v) * time.Millisecond
}

// TimeOf is the time t points to, or the zero time for nil.
func TimeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
