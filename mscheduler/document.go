package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Field names of the task document. Queries and updates name fields only
// through these, so that the schema documented in the README has one source.
const (
	fID              = "_id" // the key again: by-key lookups use the primary index
	fKey             = "key"
	fSchema          = "schema"
	fParams          = "params"
	fStatus          = "status"
	fPriority        = "priority"
	fRunAt           = "run_at"
	fConcurrency     = "concurrency"
	fDistinct        = "distinct_workers"
	fWorkerIDs       = "worker_ids"
	fGroup           = "group"
	fPingIntervalMS  = "ping_interval_ms"
	fWorkerTimeoutMS = "worker_timeout_ms"
	fMaxRetries      = "max_retries"
	fRetryDelayMS    = "retry_delay_ms"
	fMaxFailedRuns   = "max_failed_runs"
	fTimeoutMS       = "timeout_ms"
	fFree            = "free"
	fRunning         = "running"
	fSucceeded       = "succeeded"
	fFailedRuns      = "failed_runs"
	fHolders         = "holders"
	fDoneBy          = "done_by"
	fNextExpiry      = "next_expiry"
	fRev             = "rev"
	fRuns            = "runs"
	fCreatedAt       = "created_at"
	fUpdatedAt       = "updated_at"
	fDescription     = "description"
	fSource          = "source"
	fTags            = "tags"

	// Fields of a holder entry, under holders.<worker id>.
	hRun        = "run"
	hStarted    = "started"
	hLeaseUntil = "lease_until"
	hAttempt    = "attempt"
)

// taskDoc is the stored form of a task. The counters free, running,
// succeeded and failed_runs are kept by every claim and run end so that
// queries need no $expr: free = concurrency - running - succeeded.
type taskDoc struct {
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
	Holders         map[string]holder `bson:"holders,omitempty"`
	DoneBy          []string          `bson:"done_by,omitempty"`
	NextExpiry      *time.Time        `bson:"next_expiry,omitempty"`
	Rev             int64             `bson:"rev"`
	CreatedAt       time.Time         `bson:"created_at"`
	UpdatedAt       time.Time         `bson:"updated_at"`
	Description     string            `bson:"description,omitempty"`
	Source          string            `bson:"source,omitempty"`
	Tags            []string          `bson:"tags,omitempty"`
	Plan            *planDoc          `bson:"plan,omitempty"`
	Paused          bool              `bson:"paused,omitempty"`
	Invalid         *invalidNote      `bson:"invalid,omitempty"`
	ExpireAt        *time.Time        `bson:"expire_at,omitempty"` // a finished task's end of retention
	// runs, the finished runs, is only ever appended to ($push) and read
	// apart: a hand edit of an old run record must not stop the task.
}

// holder is a run in progress, stored under holders.<worker id>: a worker
// holds at most one run of a task at a time.
type holder struct {
	Run        string    `bson:"run"`
	Started    time.Time `bson:"started"`
	LeaseUntil time.Time `bson:"lease_until"`
	// Attempt is the run's local attempt, as of its last ping.
	Attempt int `bson:"attempt,omitempty"`
}

// runRecord is a finished run, appended to the task's runs (the most recent
// are kept).
type runRecord struct {
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
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func fromMS(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// holderPath is the dotted path of a worker's holder entry.
func holderPath(workerID string, field ...string) string {
	p := fHolders + "." + workerID
	for _, f := range field {
		p += "." + f
	}
	return p
}
