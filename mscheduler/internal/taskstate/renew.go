package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Renew is the fenced update that renews one run's lease to lease, in the
// form for the task's only holder (which sets next_expiry exactly) or for
// one of several (which only lowers it: the sweep raises a stale bound).
// Which form applies is a guess from the last ping; the other form is
// tried when it misses. stretched is the renewal's length when it is
// longer than the task's worker timeout, recorded as the holder's
// lease_ms, or 0, which removes a lease_ms an earlier claim or ping left:
// the sweep reads when the run was last renewed from lease_until less
// that length (see upkeep's overdue).
func Renew(id bson.RawValue, workerID, runID string, lease time.Time, attempt int, sole bool, stretched time.Duration) (filter, upd bson.D) {
	filter = RunFence(id, workerID, runID)
	var u update
	u.Set(stored.HolderPath(workerID, stored.HLeaseUntil), lease)
	u.Set(stored.HolderPath(workerID, stored.HAttempt), attempt)
	if stretched > 0 {
		u.Set(stored.HolderPath(workerID, stored.HLeaseMS), stretched.Milliseconds())
	} else {
		u.Unset(stored.HolderPath(workerID, stored.HLeaseMS))
	}
	if sole {
		filter = append(filter, bson.E{Key: stored.FRunning, Value: 1})
		u.Set(stored.FNextExpiry, lease)
		return filter, u.doc()
	}
	filter = append(filter, bson.E{Key: stored.FRunning, Value: Op("$ne", 1)})
	u.Min(stored.FNextExpiry, lease)
	return filter, u.doc()
}

// RepairExpiry is the sweep's write on a task none of whose leases lapsed
// but whose next_expiry fell due: it raises the bound to the earliest
// lease still held, or removes it from a task nobody holds. Fenced on rev
// as read, which every claim and run end moves, so it never hides a lease
// taken since the read.
func RepairExpiry(id, rev bson.RawValue, earliest time.Time) (filter, upd bson.D) {
	var u update
	if earliest.IsZero() {
		u.Unset(stored.FNextExpiry)
	} else {
		u.Set(stored.FNextExpiry, earliest)
	}
	return append(ByID(id), SameRev(rev)), u.doc()
}

// LowerExpiry lowers next_expiry to at while workerID holds run runID: the
// sweep's bound on a run whose claim guessed its lease from other tasks.
func LowerExpiry(id bson.RawValue, workerID, runID string, at time.Time) (filter, upd bson.D) {
	var u update
	u.Min(stored.FNextExpiry, at)
	return RunFence(id, workerID, runID), u.doc()
}
