package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Every filter here uses plain query operators only (no $expr), so that
// MongoDB serves it from an index and the development server runs it too.

func op(name string, v any) bson.D { return bson.D{{Key: name, Value: v}} }

// claimableStatuses are the statuses of tasks that may have a free slot.
var claimableStatuses = bson.A{StatusPending, StatusRunning}

// finishedStatuses are the statuses of tasks that run no more.
var finishedStatuses = bson.A{StatusSucceeded, StatusFailed, StatusFinished, StatusCancelled}

// eligibleFilter selects the tasks that workerID may claim a slot of, at any
// time: capacity left, not already held by this worker, not done by it when
// the task wants distinct workers, not paused, and allowed by worker ids
// and group.
func eligibleFilter(workerID string, groups []string, exclude []string) bson.D {
	groupClause := bson.A{op(fGroup, op("$exists", false))}
	if len(groups) > 0 {
		groupClause = append(groupClause, op(fGroup, op("$in", groups)))
	}
	f := bson.D{
		// $ne is implied by $in. It is there for storages that push down
		// equalities only (FerretDB on PostgreSQL: $eq and $ne), which then
		// skip the succeeded tasks, most of a collection, before reading
		// any. On MongoDB the two bounds intersect on the claim index.
		{Key: fStatus, Value: bson.D{{Key: "$in", Value: claimableStatuses}, {Key: "$ne", Value: StatusSucceeded}}},
		{Key: fFree, Value: op("$gt", 0)},
		{Key: holderPath(workerID), Value: op("$exists", false)},
		{Key: fDoneBy, Value: op("$ne", workerID)},
		{Key: fPaused, Value: op("$ne", true)},
		// Never misread a newer layout; a document without schema (added by
		// hand) is read as the current one, and inspected.
		{Key: fSchema, Value: op("$not", op("$gt", SchemaVersion))},
		{Key: "$and", Value: bson.A{
			op("$or", bson.A{
				op(fWorkerIDs, op("$exists", false)),
				op(fWorkerIDs, op("$size", 0)),
				op(fWorkerIDs, workerID),
			}),
			op("$or", groupClause),
		}},
	}
	if len(exclude) > 0 {
		f = append(f, bson.E{Key: fID, Value: op("$nin", exclude)})
	}
	return f
}

// claimFilter is eligibleFilter restricted to tasks whose time has come.
func claimFilter(workerID string, groups, exclude []string, now time.Time) bson.D {
	return append(eligibleFilter(workerID, groups, exclude), bson.E{Key: fRunAt, Value: op("$lte", now)})
}

// futureFilter is eligibleFilter restricted to tasks not yet due: the next
// of them says when to try claiming again.
func futureFilter(workerID string, groups, exclude []string, now time.Time) bson.D {
	return append(eligibleFilter(workerID, groups, exclude), bson.E{Key: fRunAt, Value: op("$gt", now)})
}

// claimSort is the claim order: higher priority first, then earlier run_at.
var claimSort = bson.D{{Key: fPriority, Value: -1}, {Key: fRunAt, Value: 1}}

// fence selects a task only while workerID still holds run runID on it.
func fence(key, workerID, runID string) bson.D {
	return bson.D{{Key: fID, Value: key}, {Key: holderPath(workerID, hRun), Value: runID}}
}

// leaseFence selects a task only while workerID still holds run runID with
// the lease it had when read: no ping renewed it since.
func leaseFence(key, workerID, runID string, leaseUntil time.Time) bson.D {
	return append(fence(key, workerID, runID), bson.E{Key: holderPath(workerID, hLeaseUntil), Value: leaseUntil})
}

// effectiveLease is when a holder's lease lapses: its lease_until, or, for
// a run that has not pinged yet (its lease is still the claim's), its
// start plus the task's worker timeout, whichever comes first.
func effectiveLease(h holder, workerTimeout time.Duration) time.Time {
	if workerTimeout > 0 && h.LeaseUntil.Sub(h.Started) == claimLease {
		return minTime(h.LeaseUntil, h.Started.Add(workerTimeout))
	}
	return h.LeaseUntil
}
