package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// ClaimableStatuses are the statuses of tasks that may have a free slot.
var ClaimableStatuses = bson.A{stored.StatusPending, stored.StatusRunning}

// FinalStatuses are the statuses of tasks that run no more.
var FinalStatuses = bson.A{stored.StatusSucceeded, stored.StatusFailed, stored.StatusFinished, stored.StatusCancelled}

// Claimant is who claims: a worker, its groups, and the tasks it skips
// for a while.
type Claimant struct {
	WorkerID string
	Groups   []string
	Skipped  []string // keys
}

// Eligible selects the tasks the claimant may claim a slot of, at any
// time: a string _id (a document cloned by hand is the periodic check's),
// capacity left, not already held by this worker, not done by it when the
// task wants distinct workers, not paused, of a layout this library
// reads, allowed by worker ids and group, and, for a plan, not an
// occurrence another run's gate is still judging.
func (c Claimant) Eligible() bson.D {
	return append(c.eligible(), bson.E{Key: stored.FID, Value: c.idClause()})
}

func (c Claimant) idClause() bson.D {
	clause := Op("$type", "string")
	if len(c.Skipped) > 0 {
		clause = append(clause, bson.E{Key: "$nin", Value: c.Skipped})
	}
	return clause
}

// eligible is Eligible without its _id clause.
func (c Claimant) eligible() bson.D {
	groupClause := bson.A{Op(stored.FGroup, Op("$exists", false))}
	if len(c.Groups) > 0 {
		groupClause = append(groupClause, Op(stored.FGroup, Op("$in", c.Groups)))
	}
	return bson.D{
		// $ne is implied by $in. It is there for storages that push down
		// equalities only (FerretDB on PostgreSQL: $eq and $ne), which then
		// skip the succeeded tasks, most of a collection, before reading
		// any. On MongoDB the two bounds intersect on the claim index.
		{Key: stored.FStatus, Value: bson.D{{Key: "$in", Value: ClaimableStatuses}, {Key: "$ne", Value: stored.StatusSucceeded}}},
		{Key: stored.FFree, Value: Op("$gt", 0)},
		{Key: stored.HolderPath(c.WorkerID), Value: Op("$exists", false)},
		{Key: stored.FDoneBy, Value: Op("$ne", c.WorkerID)},
		{Key: stored.FPaused, Value: Op("$ne", true)},
		// Never misread a newer layout; a document without schema (added by
		// hand) is read as the current one, and inspected.
		{Key: stored.FSchema, Value: Op("$not", Op("$gt", stored.SchemaVersion))},
		{Key: "$and", Value: bson.A{
			Op("$or", bson.A{
				Op(stored.FWorkerIDs, Op("$exists", false)),
				Op(stored.FWorkerIDs, Op("$size", 0)),
				Op(stored.FWorkerIDs, c.WorkerID),
			}),
			Op("$or", groupClause),
			// An occurrence whose first run is still before its plan gate
			// (held, not recorded begun) is not claimable: that gate alone
			// decides whether the occurrence runs, is skipped or missed.
			Op("$or", bson.A{
				Op(stored.FPlan, Op("$not", Op("$type", "object"))),
				Op(stored.PStarted, true),
				Op(stored.FRunning, Op("$not", Op("$gt", 0))),
			}),
		}},
	}
}

// Due selects the eligible tasks whose time has come.
func (c Claimant) Due(now time.Time) bson.D {
	return append(c.Eligible(), bson.E{Key: stored.FRunAt, Value: Op("$lte", now)})
}

// Future selects the eligible tasks not yet due: the next of them says
// when to try claiming again.
func (c Claimant) Future(now time.Time) bson.D {
	return append(c.Eligible(), bson.E{Key: stored.FRunAt, Value: Op("$gt", now)})
}

// DueByKey is Due on one task, for a statement of a batch claim: every
// write of a claim names its task.
func (c Claimant) DueByKey(id bson.RawValue, now time.Time) bson.D {
	return append(append(ByID(id), c.eligible()...), bson.E{Key: stored.FRunAt, Value: Op("$lte", now)})
}

// ClaimSort is the claim order: higher priority first, then earlier run_at.
var ClaimSort = bson.D{{Key: stored.FPriority, Value: -1}, {Key: stored.FRunAt, Value: 1}}

// ClaimLease is the lease a claim stores: an update cannot read the
// task's own worker timeout. Until the run's first ping, its lease is in
// effect the shorter of the two: started + worker_timeout_ms (see
// EffectiveLease), by which the worker cancels its handler and after which
// any sweep may expire the run. The first ping comes at the task's ping
// interval, and no later than ClaimLease/2.
const ClaimLease = 30 * time.Second

// EffectiveLease is when a holder's lease lapses: its lease_until, or, for
// a run that has not pinged yet (its lease is still the claim's), its
// start plus its lease, whichever comes first. Its lease is the task's
// worker timeout, or the holder's lease_ms if that is longer (see
// RunLease).
func EffectiveLease(h stored.Holder, workerTimeout time.Duration) time.Time {
	workerTimeout = RunLease(h, workerTimeout)
	if workerTimeout > 0 && h.LeaseUntil.Sub(h.Started) == ClaimLease {
		if end := h.Started.Add(workerTimeout); end.Before(h.LeaseUntil) {
			return end
		}
	}
	return h.LeaseUntil
}

// RunLease is the lease a holder's run is renewed by: the task's worker
// timeout, or the holder's lease_ms where a claimant on a slow server gave
// the run a longer one. A lease_ms that is not positive counts for
// nothing. Before the run's first ping, the claim's lease_until bounds it
// all the same (ClaimLease), whatever lease_ms says.
func RunLease(h stored.Holder, workerTimeout time.Duration) time.Duration {
	if h.LeaseMS > 0 {
		return max(workerTimeout, stored.FromMS(h.LeaseMS))
	}
	return workerTimeout
}

// StretchedLease is the holder's run's lease when lease_ms made it longer
// than the task's worker timeout, else 0: for a person reading the run.
func StretchedLease(h stored.Holder, workerTimeout time.Duration) time.Duration {
	if lease := RunLease(h, workerTimeout); lease > workerTimeout {
		return lease
	}
	return 0
}

// Claim is the update that claims one slot of a task for the worker's run
// h, at now. The sweep looks at the task from nextExpiry on: an update
// cannot read the task's own worker timeout, so it is the claimant's guess,
// which the run's first ping corrects.
func Claim(workerID string, h stored.Holder, nextExpiry, now time.Time) bson.D {
	var u update
	u.Set(stored.FStatus, stored.StatusRunning)
	u.Set(stored.HolderPath(workerID), h)
	u.Set(stored.FUpdatedAt, now)
	u.Inc(stored.FFree, -1)
	u.Inc(stored.FRunning, 1)
	u.Inc(stored.FRev, 1)
	u.Min(stored.FNextExpiry, nextExpiry)
	u.settle(stored.StatusRunning, someRunLeft, now, Retention{})
	return u.doc()
}

// ExactParamsMax bounds the params of an exact candidate: its claim is
// fenced on them (AsReadFence), so it carries them to the server again.
const ExactParamsMax = 4 << 10

// ExactCandidate says a candidate read in full can be claimed without a
// read back (see ClaimedAsRead): concurrency 1, an integer rev to fence
// on, params of at most ExactParamsMax bytes, and the fields the claim
// writes in the shapes ClaimedAsRead applies them to.
func ExactCandidate(raw bson.Raw) bool {
	conc, ok := raw.Lookup(stored.FConcurrency).AsInt64OK()
	if !ok || conc != 1 {
		return false
	}
	for _, f := range []string{stored.FRev, stored.FFree, stored.FRunning} {
		if t := raw.Lookup(f).Type; t != bson.TypeInt32 && t != bson.TypeInt64 {
			return false
		}
	}
	if len(raw.Lookup(stored.FParams).Value) > ExactParamsMax {
		return false // the claim would carry them back: a read back costs less
	}
	if t := raw.Lookup(stored.FHolders).Type; t != 0 && t != bson.TypeEmbeddedDocument {
		return false
	}
	if t := raw.Lookup(stored.FNextExpiry).Type; t != 0 && t != bson.TypeDateTime {
		return false
	}
	_, isString := raw.Lookup(stored.FID).StringValueOK()
	return isString
}

// AsReadFence fences a claim of an exact candidate on the task being the
// one read: the same rev (every change a run makes raises it), the same
// updated_at (every change the library makes sets it, Publish's included),
// the same created_at (a task deleted and published again under its key
// starts at rev 0 again), and the same params, which the claim hands the
// handler as read: a params update within the millisecond of updated_at,
// or made by hand, must not be claimed over. A field the task lacks must
// still be missing. Equalities only, so no hand-edited type can get the
// claim refused.
func AsReadFence(raw bson.Raw) bson.D {
	var f bson.D
	for _, field := range []string{stored.FRev, stored.FUpdatedAt, stored.FCreatedAt, stored.FParams} {
		if v := raw.Lookup(field); v.Type != 0 {
			f = append(f, bson.E{Key: field, Value: v})
		} else {
			f = append(f, bson.E{Key: field, Value: Op("$exists", false)})
		}
	}
	return f
}

// ClaimedAsRead is the task raw (an exact candidate) as Claim leaves it:
// a task of concurrency 1 whose claim was also fenced on AsReadFence is
// the candidate with the claim applied, so a batch of such claims needs no
// read back.
func ClaimedAsRead(raw bson.Raw, workerID string, h stored.Holder, now, nextExpiry time.Time) (bson.Raw, error) {
	var doc bson.M
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	holders, _ := doc[stored.FHolders].(bson.D)
	doc[stored.FHolders] = append(holders, bson.E{Key: workerID, Value: h})
	doc[stored.FStatus], doc[stored.FUpdatedAt] = stored.StatusRunning, now
	for name, by := range map[string]int32{stored.FFree: -1, stored.FRunning: 1, stored.FRev: 1} {
		switch v := doc[name].(type) {
		case int32:
			doc[name] = v + by
		case int64:
			doc[name] = v + int64(by)
		}
	}
	if at, ok := doc[stored.FNextExpiry].(bson.DateTime); !ok || nextExpiry.Before(at.Time()) {
		doc[stored.FNextExpiry] = nextExpiry
	}
	delete(doc, stored.FInvalid)
	delete(doc, stored.FExpireAt)
	return bson.Marshal(doc)
}
