package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// fInvalid holds why a task was set to StatusInvalid.
const fInvalid = "invalid"

// invalidNote is stored under invalid when a worker sets a task to
// StatusInvalid, so that a person finds every broken task, and why, with
// one query: db.tasks.find({status: "invalid"}, {invalid: 1}).
type invalidNote struct {
	// Reason names the field and what is wrong with it.
	Reason string `bson:"reason"`
	// Field is the stored field at fault, when one is.
	Field string `bson:"field,omitempty"`
	// Found says when the problem showed: claim, run end, sweep or check.
	Found    string    `bson:"found"`
	At       time.Time `bson:"at"`
	WorkerID string    `bson:"worker_id"`
	// Was is the status the task had before.
	Was bson.RawValue `bson:"was,omitempty"`
	// Run is the run that was going when the task was set invalid: its end
	// could not be recorded as usual.
	Run *runRecord `bson:"run,omitempty"`
}

// When a problem showed, for invalidNote.Found.
const (
	foundAtClaim   = "claim"
	foundAtRunEnd  = "run end"
	foundAtSweep   = "sweep"
	foundByCheck   = "check"
	foundAtRefusal = "refused claim"
)

// quarantine sets one task to StatusInvalid with the reason, in one update
// that only touches fields whose stored type allows it, so that it applies
// to any document. filter fences it: on the run being ended, or on the
// document still being as read.
type quarantine struct {
	key    string
	filter bson.D
	raw    bson.Raw // the document as last read: its counters and status
	prob   *problem
	found  string
	holder string     // the worker whose holder entry to remove, if any
	run    *runRecord // the run that ended, if any
	now    time.Time
	by     string // this worker
}

func (q *quarantine) update() bson.D {
	note := invalidNote{Reason: q.prob.Error(), Field: q.prob.field, Found: q.found, At: q.now, WorkerID: q.by, Run: q.run}
	if v := q.raw.Lookup(fStatus); v.Type != 0 {
		note.Was = v
	}
	set := bson.D{{Key: fStatus, Value: StatusInvalid}, {Key: fInvalid, Value: note}, {Key: fUpdatedAt, Value: q.now}}
	update := bson.D{{Key: "$set", Value: set}}
	if q.holder == "" {
		return update
	}
	// Give the run's slot back where the counters can take it.
	unset := bson.D{{Key: holderPath(q.holder), Value: ""}}
	inc := bson.D{}
	running, numeric := q.raw.Lookup(fRunning).AsInt64OK()
	if numeric {
		inc = append(inc, bson.E{Key: fRunning, Value: -1})
		if running <= 1 {
			unset = append(unset, bson.E{Key: fNextExpiry, Value: ""})
		}
	}
	if _, ok := q.raw.Lookup(fFree).AsInt64OK(); ok && (q.run == nil || q.run.Outcome != OutcomeSucceeded) {
		inc = append(inc, bson.E{Key: fFree, Value: 1})
	}
	if _, ok := q.raw.Lookup(fRev).AsInt64OK(); ok {
		inc = append(inc, bson.E{Key: fRev, Value: 1})
	}
	update = append(update, bson.E{Key: "$unset", Value: unset})
	if v := q.raw.Lookup(fUnlogged); q.run != nil && (v.Type == 0 || v.Type == bson.TypeEmbeddedDocument) {
		set = append(set, bson.E{Key: unloggedPath(q.run.RunID), Value: q.now})
		update[0].Value = set
	}
	if len(inc) > 0 {
		update = append(update, bson.E{Key: "$inc", Value: inc})
	}
	return update
}

// apply writes the quarantine and reports it once: a log line at WARN and
// an EventInvalid naming the key and the field. It returns false, with no
// error, when the filter no longer matches (the document changed).
func (c *Consumer[P, R]) quarantine(ctx context.Context, q *quarantine) (bool, error) {
	q.now, q.by = c.clock.Now(), c.cfg.WorkerID
	res, err := c.coll.UpdateOne(ctx, q.filter, q.update())
	if err != nil {
		return false, fmt.Errorf("mscheduler: set task %q invalid (%v): %w", q.key, q.prob, err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	err = fmt.Errorf("mscheduler: task %q set to status invalid: %w", q.key, q.prob)
	c.log.Warn("task document is invalid; set to status invalid until a person repairs it",
		"key", q.key, "field", q.prob.field, "reason", q.prob.reason, "found", q.found)
	ev := Event{Kind: EventInvalid, Key: q.key, Err: err}
	if q.run != nil {
		ev.RunID, ev.WorkerID = q.run.RunID, q.run.WorkerID
	}
	c.emit(ev)
	return true, nil
}

// readRaw reads a task document whole, for inspection; nil if the filter
// matches nothing.
func readRaw(ctx context.Context, coll *mongo.Collection, filter bson.D) (bson.Raw, error) {
	raw, err := coll.FindOne(ctx, filter).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	return raw, err
}

// unwritable reports an error with which the server refused a write
// because of what the stored document holds (a field of the wrong type,
// a document grown too large): sending the same write again cannot help.
func unwritable(err error) bool {
	var u *unreadableError
	if errors.As(err, &u) {
		return true
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return false
	}
	for _, code := range documentErrorCodes {
		if se.HasErrorCode(code) {
			return true
		}
	}
	return false
}

// documentErrorCodes are the server error codes of a write refused because
// of the stored document: TypeMismatch, BadValue (an array operator on a
// non-array), PathNotViable (a field under a non-document),
// BSONObjectTooLarge and the update results over 16 MiB, and the older
// code of $push to a non-array.
var documentErrorCodes = []int{14, 2, 28, 10334, 17419, 17420, 16837}

// unreadableError is a task document that a write needed to read back and
// could not decode.
type unreadableError struct {
	key  string
	prob *problem
}

func (e *unreadableError) Error() string {
	return fmt.Sprintf("mscheduler: task %q: %v", e.key, e.prob)
}

// problemOf inspects the document a refused write was aimed at, for a
// reason that names the field; failing that, the server's own message.
func problemOf(ctx context.Context, coll *mongo.Collection, filter bson.D, cause error) (bson.Raw, *problem) {
	raw, err := readRaw(ctx, coll, filter)
	if err == nil && raw != nil {
		if p := inspect(raw); p != nil {
			return raw, p
		}
	}
	var u *unreadableError
	if errors.As(cause, &u) {
		return raw, u.prob
	}
	return raw, &problem{field: "(document)", reason: "cannot be written: " + serverMessage(cause)}
}

// serverMessage is the server's message of an error, without the driver's
// wrapping.
func serverMessage(err error) string {
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return we.WriteErrors[0].Message
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Message
	}
	return err.Error()
}
