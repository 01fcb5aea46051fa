package mscheduler

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// The stored layout is internal/stored's, the gate every read goes through;
// every change of a task's state is internal/taskstate's. These names keep
// the public package's code short.
type (
	taskDoc   = stored.Task
	holder    = stored.Holder
	runRecord = stored.RunRecord
	planDoc   = stored.Plan
)

const (
	fID              = stored.FID
	fKey             = stored.FKey
	fSchema          = stored.FSchema
	fParams          = stored.FParams
	fStatus          = stored.FStatus
	fPriority        = stored.FPriority
	fRunAt           = stored.FRunAt
	fConcurrency     = stored.FConcurrency
	fWorkerIDs       = stored.FWorkerIDs
	fGroup           = stored.FGroup
	fPingIntervalMS  = stored.FPingIntervalMS
	fWorkerTimeoutMS = stored.FWorkerTimeoutMS
	fMaxFailedRuns   = stored.FMaxFailedRuns
	fFree            = stored.FFree
	fRunning         = stored.FRunning
	fSucceeded       = stored.FSucceeded
	fFailedRuns      = stored.FFailedRuns
	fHolders         = stored.FHolders
	fNextExpiry      = stored.FNextExpiry
	fRev             = stored.FRev
	fRuns            = stored.FRuns
	fCreatedAt       = stored.FCreatedAt
	fUpdatedAt       = stored.FUpdatedAt
	fTags            = stored.FTags
	fPlan            = stored.FPlan
	fPaused          = stored.FPaused
	fInvalid         = stored.FInvalid
	fExpireAt        = stored.FExpireAt
	fUnlogged        = stored.FUnlogged

	hRun        = stored.HRun
	hLeaseUntil = stored.HLeaseUntil
)

func ms(d time.Duration) int64 { return stored.MS(d) }

func fromMS(v int64) time.Duration { return stored.FromMS(v) }

func holderPath(workerID string, field ...string) string {
	return stored.HolderPath(workerID, field...)
}
