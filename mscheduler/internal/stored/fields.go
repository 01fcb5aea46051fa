package stored

// Field names of a task document. Queries and updates name fields only
// through these, so that the layout documented in the README has one
// source.
const (
	FID              = "_id" // the key: by-key lookups use the primary index
	FKey             = "key" // the key again, for people reading the collection
	FSchema          = "schema"
	FParams          = "params"
	FStatus          = "status"
	FPriority        = "priority"
	FRunAt           = "run_at"
	FConcurrency     = "concurrency"
	FDistinct        = "distinct_workers"
	FWorkerIDs       = "worker_ids"
	FGroup           = "group"
	FPingIntervalMS  = "ping_interval_ms"
	FWorkerTimeoutMS = "worker_timeout_ms"
	FMaxRetries      = "max_retries"
	FRetryDelayMS    = "retry_delay_ms"
	FMaxFailedRuns   = "max_failed_runs"
	FTimeoutMS       = "timeout_ms"
	FFree            = "free"
	FRunning         = "running"
	FSucceeded       = "succeeded"
	FFailedRuns      = "failed_runs"
	FHolders         = "holders"
	FDoneBy          = "done_by"
	FNextExpiry      = "next_expiry"
	FRev             = "rev"
	FRuns            = "runs"
	FCreatedAt       = "created_at"
	FUpdatedAt       = "updated_at"
	FDescription     = "description"
	FSource          = "source"
	FTags            = "tags"
	FHeaders         = "headers"
	FPlan            = "plan"
	FPaused          = "paused"
	// FInvalid holds why a task was set to StatusInvalid.
	FInvalid = "invalid"
	// FExpireAt is when a finished task, or a run record, may be deleted.
	FExpireAt = "expire_at"
	// FUnlogged maps the runs ended on a task whose history record may
	// not be written yet to their finish time.
	FUnlogged = "unlogged"

	// Fields of a holder entry, under holders.<worker id>.
	HRun        = "run"
	HStarted    = "started"
	HLeaseUntil = "lease_until"
	HAttempt    = "attempt"
	HLeaseMS    = "lease_ms"

	// Fields of a task's plan, as dotted paths.
	PPlanned     = "plan.planned"
	PRuns        = "plan.runs"
	PSkipped     = "plan.skipped"
	PMissedCount = "plan.missed_count"
	PSkipNext    = "plan.skip_next"
	PScheduled   = "plan.scheduled"
	PStarted     = "plan.started"
)

// HolderPath is the dotted path of a worker's holder entry, or of a field
// of it.
func HolderPath(workerID string, field ...string) string {
	p := FHolders + "." + workerID
	for _, f := range field {
		p += "." + f
	}
	return p
}

// UnloggedPath is the dotted path of a run's history mark.
func UnloggedPath(runID string) string { return FUnlogged + "." + runID }
