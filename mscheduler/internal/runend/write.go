package runend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// End writes the end of one run: the owner's transition (taskstate.End)
// with the reads and retries around it.
type End struct {
	taskstate.End
	Key string // the task key, for messages
	// Held is done once the run's lease is gone: a batch holding the end
	// waits for its write while any of its runs' is not. Nil: never done.
	Held context.Context
	// SendBy is when the end must be on its way for its write to land
	// within the lease, as the server answers now: a batcher whose loop
	// has not taken it by then leaves it to be written alone. Zero: no
	// bound.
	SendBy time.Time
}

// tryLikely writes the likely case alone and reports whether it matched,
// and the filter it tried (nil when no case was likely).
func (e *End) tryLikely(ctx context.Context, coll *mongo.Collection) (bool, bson.D, error) {
	c, ok := e.Likely()
	if !ok {
		return false, nil, nil
	}
	filter := e.Filter(c)
	res, err := coll.UpdateOne(ctx, filter, e.Update(c))
	if err != nil {
		return false, filter, err
	}
	return res.MatchedCount > 0, filter, nil
}

// ErrGone says the run no longer holds its slot: its lease was lost.
var ErrGone = errors.New("run no longer holds its slot")

// maxEndTries is how often a run end is rebuilt at once after concurrent
// writes moved the task between cases; past it, each try waits a moment so
// that the writers moving it fall out of step.
const maxEndTries = 5

// Write applies the run end. It returns ErrGone when the fence matches
// nothing: another worker took the slot, and nothing was written. It tries
// until it succeeds or ctx ends.
func (e *End) Write(ctx context.Context, coll *mongo.Collection) error {
	same := 0 // how often in a row the write missed, the task as read unchanged
	for try := 0; ; try++ {
		done, filter, err := e.tryLikely(ctx, coll)
		if err != nil {
			return fmt.Errorf("mscheduler: end run %s of %q: %w", e.Record.RunID, e.Key, err)
		}
		if done {
			return nil
		}
		held, err := e.reread(ctx, coll)
		if err != nil {
			return err
		}
		if !held {
			return e.GoneOrApplied(ctx, coll)
		}
		if next, ok := e.Likely(); !ok || sameFilter(e.Filter(next), filter) {
			same++ // the task as read again calls for the very write that missed
		} else {
			same = 0
		}
		if same >= maxSameMisses {
			if err := e.unmatchable(ctx, coll, filter); err != nil {
				return err
			}
			same = 0 // every field is there: writers racing, which fall out of step
		}
		if try >= maxEndTries {
			select {
			case <-ctx.Done():
				return fmt.Errorf("mscheduler: end run %s of %q: the task kept changing: %w", e.Record.RunID, e.Key, ctx.Err())
			case <-time.After(time.Duration(float64(10*time.Millisecond) * (0.8 + 0.4*rand.Float64()))):
			}
		}
	}
}

// maxSameMisses is how often the same write may miss a task whose fence
// still holds before the task is looked at for a field the write's filter
// needs and the task lacks: a counter removed by hand (Refresh reads it as
// 0) misses every filter built from it, and would be tried for ever.
const maxSameMisses = 3

func sameFilter(a, b bson.D) bool {
	x, err1 := bson.Marshal(a)
	y, err2 := bson.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// unmatchable reads the task again and returns the error of a run end
// that can never match it, naming the first field its filter needs that
// the task lacks (a person finds it on the task, set invalid); nil when
// the task has every one, and the misses were concurrent writes.
func (e *End) unmatchable(ctx context.Context, coll *mongo.Collection, filter bson.D) error {
	if filter == nil {
		return &Unreadable{Key: e.Key, Problem: stored.Problemf(stored.WholeDocument, "fits none of the cases a run end is written in (status %q, running %d, free %d)", e.Seen.Status, e.Seen.Running, e.Seen.Free)}
	}
	clauses := filter[min(len(e.Fence), len(filter)):]
	fields := filterFields(clauses, nil)
	proj := bson.D{{Key: stored.FID, Value: 1}}
	for _, f := range fields {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	raw, err := coll.FindOne(ctx, e.Fence, options.FindOne().SetProjection(proj)).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil // no longer held: the next try tells
	case err != nil:
		return fmt.Errorf("mscheduler: read task %q: %w", e.Key, err)
	}
	for _, f := range fields {
		if _, err := raw.LookupErr(strings.Split(f, ".")...); err != nil {
			return &Unreadable{Key: e.Key, Problem: stored.Problemf(f, "is missing (removed by hand?): the end of run %s, filtered on %s, can match nothing", e.Record.RunID, describeFilter(clauses))}
		}
	}
	return nil
}

// filterFields are the fields a filter's clauses name, under $or, $and
// and $nor too, in order.
func filterFields(d bson.D, out []string) []string {
	for _, e := range d {
		if !strings.HasPrefix(e.Key, "$") {
			if !slices.Contains(out, e.Key) {
				out = append(out, e.Key)
			}
			continue
		}
		if arr, ok := e.Value.(bson.A); ok {
			for _, v := range arr {
				if sub, ok := v.(bson.D); ok {
					out = filterFields(sub, out)
				}
			}
		}
	}
	return out
}

func describeFilter(f bson.D) string {
	b, err := bson.MarshalExtJSON(f, false, false)
	if err != nil {
		return fmt.Sprint(f)
	}
	return string(b)
}

// GoneOrApplied tells, once the run no longer holds its slot, whether an
// earlier try of this very write was applied (its reply lost or late) or
// another worker took the slot. The task keeps the record of each run it
// ended (the most recent RunsKept): this end's, with its outcome and
// finish time, says it applied; another record of the run (expired, by a
// sweep whose clock may read the very same millisecond) says it was taken.
// Only when the task kept no record of the run (more runs ended since
// than it keeps) does the run's history mark decide, by its time.
func (e *End) GoneOrApplied(ctx context.Context, coll *mongo.Collection) error {
	proj := bson.D{{Key: stored.FRuns, Value: 1}, {Key: stored.UnloggedPath(e.Record.RunID), Value: 1}}
	raw, err := coll.FindOne(ctx, taskstate.ByID(e.ID), options.FindOne().SetProjection(proj)).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return ErrGone
	case err != nil:
		return fmt.Errorf("mscheduler: read task %q: %w", e.Key, err)
	}
	for _, r := range stored.KeptRuns(raw) {
		if r.RunID == e.Record.RunID {
			if r.Outcome == e.Record.Outcome && r.Finished.Equal(e.Record.Finished) {
				return nil
			}
			return ErrGone
		}
	}
	if mark, ok := raw.Lookup(stored.FUnlogged, e.Record.RunID).TimeOK(); ok && mark.Equal(e.Record.Finished) {
		return nil
	}
	return ErrGone
}

// reread reports whether the fence still matches, and refreshes the seen
// state and max_failed_runs (an operator may have changed it). A field it
// needs edited into the wrong type makes the end unwritable as it is.
func (e *End) reread(ctx context.Context, coll *mongo.Collection) (bool, error) {
	raw, err := coll.FindOne(ctx, e.Fence, options.FindOne().SetProjection(taskstate.RefreshProjection())).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mscheduler: read task %q: %w", e.Key, err)
	}
	if prob := e.Refresh(raw); prob != nil {
		return true, &Unreadable{Key: e.Key, Problem: prob}
	}
	return true, nil
}

// Unwritable reports an error with which the server refused a write
// because of what the stored document holds (a field of the wrong type,
// a document grown too large): sending the same write again cannot help.
func Unwritable(err error) bool {
	var u *Unreadable
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

// Unreadable is a task document that a write needed to read back and
// could not decode: the problem names the field.
type Unreadable struct {
	Key     string
	Problem *stored.Problem
}

func (e *Unreadable) Error() string {
	return fmt.Sprintf("mscheduler: task %q: %v", e.Key, e.Problem)
}
