package upkeep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Quarantine sets one task to StatusInvalid with the reason (see
// taskstate.Quarantine), fenced on the run being ended or on the document
// as read, plus Extra (the check's: still unclaimable, so that a repair
// made meanwhile stands).
type Quarantine struct {
	Q     taskstate.Quarantine
	Extra bson.D
}

// NewQuarantine prepares the quarantine of the task raw, as read, for prob
// found at found.
func NewQuarantine(raw bson.Raw, prob *stored.Problem, found string) *Quarantine {
	return &Quarantine{Q: taskstate.Quarantine{Raw: raw, Problem: prob, Found: found}}
}

// Ending says the quarantine ends run runID of workerID (rec, when set, is
// the run's record, kept in the note); lease, when not zero, fences it on
// the lapsed lease as read too.
func (q *Quarantine) Ending(workerID, runID string, rec *stored.RunRecord, lease time.Time) *Quarantine {
	q.Q.Holder, q.Q.RunID, q.Q.Run, q.Q.Lease = workerID, runID, rec, lease
	return q
}

// Quarantine writes the quarantine and reports it once: a log line at
// WARN and a report naming the key and the field. It returns false, with
// no error, when the filter no longer matches (the document changed).
func (w *Worker) Quarantine(ctx context.Context, q *Quarantine) (bool, error) {
	q.Q.Now, q.Q.By = w.Clock.Now(), w.ID
	key := stored.IDString(q.Q.Raw.Lookup(stored.FID))
	res, err := w.Coll.UpdateOne(ctx, append(q.Q.Filter(), q.Extra...), q.Q.Update())
	if err != nil {
		return false, fmt.Errorf("mscheduler: set task %q invalid (%v): %w", key, q.Q.Problem, err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	err = fmt.Errorf("mscheduler: task %q set to status invalid: %w", key, q.Q.Problem)
	w.Log.Warn("task document is invalid; set to status invalid until a person repairs it",
		"key", key, "field", q.Q.Problem.Field, "reason", q.Q.Problem.Reason, "found", q.Q.Found)
	var runID, workerID string
	if r := q.Q.Run; r != nil {
		runID, workerID = r.RunID, r.WorkerID
	}
	w.Report.Invalid(key, runID, workerID, err)
	return true, nil
}

// ProblemOf inspects the document a refused write was aimed at, for a
// reason that names the field; failing that, the server's own message.
func (w *Worker) ProblemOf(ctx context.Context, filter bson.D, cause error) (bson.Raw, *stored.Problem) {
	raw, err := readRaw(ctx, w.Coll, filter)
	if err == nil && raw != nil {
		if p := w.Inspect(raw); p != nil {
			return raw, p
		}
	}
	var u *runend.Unreadable
	if errors.As(cause, &u) {
		return raw, u.Problem
	}
	return raw, &stored.Problem{Field: stored.WholeDocument, Reason: "cannot be written: " + ServerMessage(cause)}
}
