package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// quarantine sets one task to StatusInvalid with the reason (see
// taskstate.Quarantine), fenced on the run being ended or on the document
// as read, plus extra (the check's: still unclaimable, so that a repair
// made meanwhile stands).
type quarantine struct {
	q     taskstate.Quarantine
	extra bson.D
}

// newQuarantine prepares the quarantine of the task raw, as read, for prob
// found at found.
func newQuarantine(raw bson.Raw, prob *problem, found string) *quarantine {
	return &quarantine{q: taskstate.Quarantine{Raw: raw, Problem: prob, Found: found}}
}

// ending says the quarantine ends run runID of workerID (rec, when set, is
// the run's record, kept in the note); lease, when not zero, fences it on
// the lapsed lease as read too.
func (q *quarantine) ending(workerID, runID string, rec *runRecord, lease time.Time) *quarantine {
	q.q.Holder, q.q.RunID, q.q.Run, q.q.Lease = workerID, runID, rec, lease
	return q
}

// apply writes the quarantine and reports it once: a log line at WARN and
// an EventInvalid naming the key and the field. It returns false, with no
// error, when the filter no longer matches (the document changed).
func (c *Consumer[P, R]) quarantine(ctx context.Context, q *quarantine) (bool, error) {
	q.q.Now, q.q.By = c.clock.Now(), c.cfg.WorkerID
	key := stored.IDString(q.q.Raw.Lookup(fID))
	res, err := c.coll.UpdateOne(ctx, append(q.q.Filter(), q.extra...), q.q.Update())
	if err != nil {
		return false, fmt.Errorf("mscheduler: set task %q invalid (%v): %w", key, q.q.Problem, err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	err = fmt.Errorf("mscheduler: task %q set to status invalid: %w", key, q.q.Problem)
	c.log.Warn("task document is invalid; set to status invalid until a person repairs it",
		"key", key, "field", q.q.Problem.Field, "reason", q.q.Problem.Reason, "found", q.q.Found)
	ev := Event{Kind: EventInvalid, Key: key, Err: err}
	if r := q.q.Run; r != nil {
		ev.RunID, ev.WorkerID = r.RunID, r.WorkerID
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

// problemOf inspects the document a refused write was aimed at, for a
// reason that names the field; failing that, the server's own message.
func problemOf(ctx context.Context, coll *mongo.Collection, filter bson.D, cause error) (bson.Raw, *problem) {
	raw, err := readRaw(ctx, coll, filter)
	if err == nil && raw != nil {
		if p := inspect(raw); p != nil {
			return raw, p
		}
	}
	var u *runend.Unreadable
	if errors.As(cause, &u) {
		return raw, u.Problem
	}
	return raw, &problem{Field: "(document)", Reason: "cannot be written: " + serverMessage(cause)}
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
