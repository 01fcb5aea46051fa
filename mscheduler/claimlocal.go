package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A batch claim reads its claims back (its third command) because a
// statement that matched says nothing of the task it claimed. For a task
// of concurrency 1 whose statement is also fenced on the rev, update and
// creation times it was read with, it does: no other run holds it, and
// every change the library makes that a run can see raises rev or sets
// updated_at, so the task as claimed is the candidate
// with the claim's update applied. (A hand edit does not raise rev; one
// landing between the read and the claim is seen by the next run, as one
// a moment after the claim would be.) When every statement of a batch is
// of that kind and all matched, the batch is two commands.

// exactCandidate says a candidate read in full can be claimed without a
// read back: concurrency 1, an integer rev to fence on, and the fields the
// claim writes in the shapes asClaimed applies them to.
func exactCandidate(raw bson.Raw) bool {
	conc, ok := raw.Lookup(fConcurrency).AsInt64OK()
	if !ok || conc != 1 {
		return false
	}
	for _, f := range []string{fRev, fFree, fRunning} {
		if t := raw.Lookup(f).Type; t != bson.TypeInt32 && t != bson.TypeInt64 {
			return false
		}
	}
	if t := raw.Lookup(fHolders).Type; t != 0 && t != bson.TypeEmbeddedDocument {
		return false
	}
	if t := raw.Lookup(fNextExpiry).Type; t != 0 && t != bson.TypeDateTime {
		return false
	}
	return true
}

// asReadFence fences a claim of an exact candidate on the task being the
// one read: the same rev (every change a run makes raises it), the same
// updated_at (every change the library makes sets it, Publish's included)
// and the same created_at (a task deleted and published again under its
// key starts at rev 0 again). A field the task lacks must still be
// missing. Equalities only, so no hand-edited type can get the claim
// refused.
func asReadFence(raw bson.Raw) bson.D {
	var f bson.D
	for _, field := range []string{fRev, fUpdatedAt, fCreatedAt} {
		if v := raw.Lookup(field); v.Type != 0 {
			f = append(f, bson.E{Key: field, Value: v})
		} else {
			f = append(f, bson.E{Key: field, Value: op("$exists", false)})
		}
	}
	return f
}

// asClaimed is the task raw (an exact candidate) as the claim update
// leaves it: status running, this worker's holder entry, free down and
// running and rev up by one, next_expiry lowered to nextExpiry, the old
// invalid reason gone.
func asClaimed(raw bson.Raw, workerID string, h holder, now, nextExpiry time.Time) (bson.Raw, error) {
	var doc bson.M
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	holders, _ := doc[fHolders].(bson.D)
	doc[fHolders] = append(holders, bson.E{Key: workerID, Value: h})
	doc[fStatus], doc[fUpdatedAt] = StatusRunning, now
	for name, by := range map[string]int32{fFree: -1, fRunning: 1, fRev: 1} {
		switch v := doc[name].(type) {
		case int32:
			doc[name] = v + by
		case int64:
			doc[name] = v + int64(by)
		}
	}
	if at, ok := doc[fNextExpiry].(bson.DateTime); !ok || nextExpiry.Before(at.Time()) {
		doc[fNextExpiry] = nextExpiry
	}
	delete(doc, fInvalid)
	return bson.Marshal(doc)
}
