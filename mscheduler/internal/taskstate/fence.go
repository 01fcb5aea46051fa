package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Every write about a task is fenced on its _id exactly as it was read (a
// bson.RawValue), never on a decoded copy of another field: a document
// cloned by hand shares every field with its original but the _id.

// KeyID is the _id of the task with a key, as a producer action given the
// key reads and fences it.
func KeyID(key string) bson.RawValue {
	t, v, err := bson.MarshalValue(key)
	if err != nil {
		panic("taskstate: encode a key: " + err.Error()) // a string always encodes
	}
	return bson.RawValue{Type: t, Value: v}
}

// ByID selects the task with the _id as read.
func ByID(id bson.RawValue) bson.D { return bson.D{{Key: stored.FID, Value: id}} }

// RunFence selects the task only while workerID still holds run runID on
// it.
func RunFence(id bson.RawValue, workerID, runID string) bson.D {
	return bson.D{{Key: stored.FID, Value: id}, {Key: stored.HolderPath(workerID, stored.HRun), Value: runID}}
}

// LeaseFence selects the task only while workerID still holds run runID
// with the lease it had when read: no ping renewed it since.
func LeaseFence(id bson.RawValue, workerID, runID string, leaseUntil time.Time) bson.D {
	return append(RunFence(id, workerID, runID), bson.E{Key: stored.HolderPath(workerID, stored.HLeaseUntil), Value: leaseUntil})
}

// AsRead fences a write on a task not having changed since it was read:
// same rev, or, for a document without one, same status (or still none).
// Equalities on the values as read, so that no stored type can make it
// refused.
func AsRead(raw bson.Raw) bson.D {
	f := bson.D{{Key: stored.FID, Value: raw.Lookup(stored.FID)}}
	for _, field := range []string{stored.FRev, stored.FStatus} {
		if v := raw.Lookup(field); v.Type != 0 {
			return append(f, bson.E{Key: field, Value: v})
		}
	}
	return append(f, bson.E{Key: stored.FStatus, Value: Op("$exists", false)})
}

// RevFence matches a task still at rev; 0 also matches a document added by
// hand without one.
func RevFence(rev int64) bson.E {
	if rev == 0 {
		return bson.E{Key: stored.FRev, Value: Op("$in", bson.A{0, nil})}
	}
	return bson.E{Key: stored.FRev, Value: rev}
}

// SameRev matches a task whose rev is exactly as read, whatever its type
// (missing: still missing).
func SameRev(rev bson.RawValue) bson.E { return sameField(stored.FRev, rev) }

// Unchanged selects the task with the _id only while its rev and
// updated_at are exactly as read: every change of its state moves rev,
// and a publish that replaces its params or run_at moves updated_at.
func Unchanged(id, rev, updatedAt bson.RawValue) bson.D {
	return append(ByID(id), SameRev(rev), sameField(stored.FUpdatedAt, updatedAt))
}

// sameField matches a field exactly as read, whatever its type (missing:
// still missing).
func sameField(field string, v bson.RawValue) bson.E {
	if v.Type == 0 {
		return bson.E{Key: field, Value: Op("$exists", false)}
	}
	return bson.E{Key: field, Value: v}
}
