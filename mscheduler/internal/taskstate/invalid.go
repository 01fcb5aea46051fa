package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// When a problem showed, for the invalid note's found.
const (
	FoundAtClaim   = "claim"
	FoundAtRunEnd  = "run end"
	FoundAtSweep   = "sweep"
	FoundByCheck   = "check"
	FoundAtRefusal = "refused claim"
)

// Quarantine sets a task that cannot be served as stored to
// StatusInvalid, with a note naming the field at fault, so that every
// worker leaves it until a person repairs it and one query finds it. It
// writes only fields whose stored type allows the write, so that it
// applies to any document, fenced on Filter: the run being ended, or the
// document as read.
type Quarantine struct {
	Raw     bson.Raw // the task as read: its _id, counters and status
	Problem *stored.Problem
	Found   string
	// Holder, when set, is the worker whose run RunID ends with the
	// quarantine: its entry goes, and Run, when set, is recorded in the
	// note (its end could not be written as usual).
	Holder string
	RunID  string
	Run    *stored.RunRecord
	// Lease, when set, fences the quarantine of a lapsed run on its lease
	// as read too (a sweep's): a ping since means the run lives.
	Lease time.Time
	Now   time.Time
	By    string // the worker writing it
}

// Filter fences the quarantine: on the run being ended, else on the
// document as read.
func (q *Quarantine) Filter() bson.D {
	var f bson.D
	switch {
	case q.Holder != "" && !q.Lease.IsZero():
		f = LeaseFence(q.Raw.Lookup(stored.FID), q.Holder, q.RunID, q.Lease)
	case q.Holder != "":
		f = RunFence(q.Raw.Lookup(stored.FID), q.Holder, q.RunID)
	default:
		return AsRead(q.Raw)
	}
	if q.holders() <= 1 {
		// The update takes the task out of the sweep's range, as the last
		// run's end: only if no claim came since the read (the document
		// may be the run's own, read at its claim). Else a run claimed
		// since would be left held on an invalid task no sweep reads.
		f = append(f, asReadField(q.Raw, stored.FRunning))
	}
	return f
}

// asReadField fences on a field's value as read, or its absence.
func asReadField(raw bson.Raw, field string) bson.E {
	if v := raw.Lookup(field); v.Type != 0 {
		return bson.E{Key: field, Value: v}
	}
	return bson.E{Key: field, Value: Op("$exists", false)}
}

// Update is the quarantine's update.
func (q *Quarantine) Update() bson.D {
	note := stored.InvalidNote{Reason: q.Problem.Error(), Field: q.Problem.Field, Found: q.Found, At: q.Now, WorkerID: q.By, Run: q.Run}
	if v := q.Raw.Lookup(stored.FStatus); v.Type != 0 {
		note.Was = v
	}
	var u update
	u.Set(stored.FStatus, stored.StatusInvalid)
	u.Set(stored.FInvalid, note)
	u.Set(stored.FUpdatedAt, q.Now)
	u.Unset(stored.FExpireAt) // a person must look at it first
	holders := q.holders()
	if q.Holder != "" {
		u.Unset(stored.HolderPath(q.Holder))
		holders--
		// Give the run's slot back where the counters can take it.
		if _, ok := q.Raw.Lookup(stored.FRunning).AsInt64OK(); ok {
			u.Inc(stored.FRunning, -1)
		}
		if _, ok := q.Raw.Lookup(stored.FFree).AsInt64OK(); ok && (q.Run == nil || q.Run.Outcome != stored.OutcomeSucceeded) {
			u.Inc(stored.FFree, 1)
		}
		if v := q.Raw.Lookup(stored.FUnlogged); q.Run != nil && (v.Type == 0 || v.Type == bson.TypeEmbeddedDocument) {
			u.Set(stored.UnloggedPath(q.Run.RunID), q.Now)
		}
	}
	if holders <= 0 {
		// No run left to sweep: out of the sweep's range, which a stuck
		// document would otherwise fill.
		u.Unset(stored.FNextExpiry)
	}
	if _, ok := q.Raw.Lookup(stored.FRev).AsInt64OK(); ok {
		u.Inc(stored.FRev, 1)
	}
	return u.doc()
}

// holders is how many holder entries the task had as read that the
// library can end or sweep: holders that do not decode, or whose dates are
// not dates (no fence matches them), hold none.
func (q *Quarantine) holders() int {
	var holders map[string]stored.Holder
	if q.Raw.Lookup(stored.FHolders).Unmarshal(&holders) != nil || stored.HolderDatesProblem(q.Raw) != nil {
		return 0
	}
	return len(holders)
}
