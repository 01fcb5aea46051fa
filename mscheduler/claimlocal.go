package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A batch claim reads its claims back (its third command) because a
// statement that matched says nothing of the task it claimed. For a task
// of concurrency 1 whose statement is also fenced on the rev it was read
// with, it does: no other run holds it, and every change the library makes
// that a run can see raises rev, so the task as claimed is the candidate
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

// asClaimed is the task raw (an exact candidate) as the claim update
// leaves it: status running, this worker's holder entry, free down and
// running and rev up by one, next_expiry lowered to nextExpiry, the old
// invalid reason gone.
func asClaimed(raw bson.Raw, workerID string, h holder, now, nextExpiry time.Time) (bson.Raw, error) {
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	holders := bson.D{}
	if v, ok := field(doc, fHolders).(bson.D); ok {
		holders = v
	}
	holders = setField(holders, workerID, h)
	doc = setField(doc, fStatus, StatusRunning)
	doc = setField(doc, fHolders, holders)
	doc = setField(doc, fUpdatedAt, now)
	for _, inc := range []struct {
		name string
		by   int32
	}{{fFree, -1}, {fRunning, 1}, {fRev, 1}} {
		switch v := field(doc, inc.name).(type) {
		case int32:
			doc = setField(doc, inc.name, v+inc.by)
		case int64:
			doc = setField(doc, inc.name, v+int64(inc.by))
		}
	}
	if at, ok := field(doc, fNextExpiry).(bson.DateTime); !ok || nextExpiry.Before(at.Time()) {
		doc = setField(doc, fNextExpiry, nextExpiry)
	}
	kept := doc[:0]
	for _, e := range doc {
		if e.Key != fInvalid {
			kept = append(kept, e)
		}
	}
	return bson.Marshal(kept)
}

// field is the value of the top-level field name of doc, or nil.
func field(doc bson.D, name string) any {
	for _, e := range doc {
		if e.Key == name {
			return e.Value
		}
	}
	return nil
}

// setField sets the top-level field name of doc, appending it if it is
// missing, as $set does.
func setField(doc bson.D, name string, v any) bson.D {
	for i, e := range doc {
		if e.Key == name {
			doc[i].Value = v
			return doc
		}
	}
	return append(doc, bson.E{Key: name, Value: v})
}
