package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// The claim query only matches well-formed documents, so a document that a
// person added or edited into a shape it cannot match (no status, an
// unknown one, a run_at that is not a date, a missing counter, an _id that
// is not a string, a group that is not a string) would wait for ever,
// silently, while it looks pending; one whose runs no longer add up would
// stay running; one whose bound fields contradict its status would be
// deleted live or never swept. The periodic check finds them with Audit,
// and sets each invalid with the reason (stored.DecodeTask's problem) or
// repairs it (Repair).

func notType(field, typ string) bson.D { return Op(field, Op("$not", Op("$type", typ))) }

// presentNot matches a field that is there and not of typ.
func presentNot(field, typ string) bson.D {
	return Op(field, bson.D{{Key: "$exists", Value: true}, {Key: "$not", Value: Op("$type", typ)}})
}

// noHolders matches a task whose holders is missing or empty.
var noHolders = Op("$or", bson.A{Op(stored.FHolders, Op("$exists", false)), Op(stored.FHolders, bson.D{})})

// Audit selects the documents the check looks at. Each clause is served by
// an index the claims already need: the status of an unknown one by claim
// (status, ...), the others by due (status, run_at), so that the cost of
// a check is one read of the claimable tasks that are due (and of the
// invalid ones with no note).
func Audit(now time.Time) bson.D {
	known := make(bson.A, len(stored.Statuses))
	for i, s := range stored.Statuses {
		known[i] = s
	}
	claimable := bson.E{Key: stored.FStatus, Value: Op("$in", ClaimableStatuses)}
	due := bson.E{Key: stored.FRunAt, Value: Op("$lte", now)}
	return bson.D{{Key: "$or", Value: bson.A{
		Op(stored.FStatus, Op("$nin", known)),
		bson.D{claimable, {Key: stored.FRunAt, Value: Op("$not", Op("$type", "date"))}},
		bson.D{claimable, due, {Key: "$or", Value: bson.A{
			notType(stored.FFree, "number"),
			notType(stored.FConcurrency, "number"),
			notType(stored.FRunning, "number"),
			notType(stored.FID, "string"),
			presentNot(stored.FGroup, "string"),
			presentNot(stored.FWorkerIDs, "array"),
			presentNot(stored.FHolders, "object"),
			bson.D{{Key: stored.FRunning, Value: Op("$ne", 0)}, noHolders[0]},
			bson.D{{Key: stored.FStatus, Value: stored.StatusRunning}, noHolders[0]},
			bson.D{{Key: stored.FHolders, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: bson.D{}}}}, {Key: stored.FNextExpiry, Value: Op("$not", Op("$type", "date"))}},
		}}},
		bson.D{{Key: stored.FStatus, Value: stored.StatusPending}, due, {Key: stored.FRunning, Value: Op("$lte", 0)}, {Key: stored.FFree, Value: Op("$lte", 0)}},
		bson.D{{Key: stored.FStatus, Value: Op("$in", bson.A{stored.StatusPending, stored.StatusRunning, stored.StatusInvalid})}, {Key: stored.FExpireAt, Value: Op("$exists", true)}},
		// Invalid, with no note to say why (set by hand, or its note
		// removed): nothing else ever looks at it again.
		bson.D{{Key: stored.FStatus, Value: stored.StatusInvalid}, {Key: "$or", Value: bson.A{
			notType(stored.FInvalid, "object"),
			notType(stored.FInvalid+".reason", "string"),
		}}},
	}}}
}

// Repair is the write that brings back the fields bound to the status of
// a task, or nil when they hold: expire_at removed from a task not
// finished for good (retention would delete it live) or edited into
// something other than a date, next_expiry restored on a task runs hold
// (the sweep would never see their leases). The check tries it before it
// sets a task invalid: a bound field is the library's to repair. Fenced
// on the task as read.
func Repair(raw bson.Raw, now time.Time) (filter, upd bson.D) {
	t, _ := stored.DecodeTask(raw) // what decodes
	var u update
	if v := raw.Lookup(stored.FExpireAt); v.Type != 0 && (v.Type != bson.TypeDateTime || !(t.Status.Final() && t.Running == 0)) {
		u.Unset(stored.FExpireAt)
	}
	if len(t.Holders) > 0 && raw.Lookup(stored.FNextExpiry).Type != bson.TypeDateTime {
		earliest := now
		for _, h := range t.Holders {
			earliest = minTime(earliest, h.LeaseUntil)
		}
		u.Set(stored.FNextExpiry, earliest)
	}
	if len(u.doc()) == 0 {
		return nil, nil
	}
	return AsRead(raw), u.doc()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
