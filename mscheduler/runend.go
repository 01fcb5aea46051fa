package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// runEnd writes the end of one run: the owner's transition
// (taskstate.End) with the reads and retries around it.
type runEnd struct {
	taskstate.End
	key string // the task key, for messages
}

// tryLikely writes the likely case alone and reports whether it matched.
func (e *runEnd) tryLikely(ctx context.Context, coll *mongo.Collection) (bool, error) {
	c, ok := e.Likely()
	if !ok {
		return false, nil
	}
	res, err := coll.UpdateOne(ctx, e.Filter(c), e.Update(c))
	if err != nil {
		return false, err
	}
	return res.MatchedCount > 0, nil
}

// errRunGone says the run no longer holds its slot: its lease was lost.
var errRunGone = errors.New("run no longer holds its slot")

// maxEndTries is how often a run end is rebuilt at once after concurrent
// writes moved the task between cases; past it, each try waits a moment so
// that the writers moving it fall out of step.
const maxEndTries = 5

// write applies the run end. It returns errRunGone when the fence matches
// nothing: another worker took the slot, and nothing was written. It tries
// until it succeeds or ctx ends.
func (e *runEnd) write(ctx context.Context, coll *mongo.Collection) error {
	for try := 0; ; try++ {
		done, err := e.tryLikely(ctx, coll)
		if err != nil {
			return fmt.Errorf("mscheduler: end run %s of %q: %w", e.Record.RunID, e.key, err)
		}
		if done {
			return nil
		}
		held, err := e.reread(ctx, coll)
		if err != nil {
			return err
		}
		if !held {
			return e.goneOrApplied(ctx, coll)
		}
		if try >= maxEndTries {
			select {
			case <-ctx.Done():
				return fmt.Errorf("mscheduler: end run %s of %q: the task kept changing: %w", e.Record.RunID, e.key, ctx.Err())
			case <-time.After(jitter(10 * time.Millisecond)):
			}
		}
	}
}

// goneOrApplied tells, once the run no longer holds its slot, whether an
// earlier try of this very write was applied (its reply lost or late) or
// another worker took the slot. The task keeps the record of each run it
// ended (the most recent RunsKept): this end's, with its outcome and
// finish time, says it applied; another record of the run (expired, by a
// sweep whose clock may read the very same millisecond) says it was taken.
// Only when the task kept no record of the run (more runs ended since
// than it keeps) does the run's history mark decide, by its time.
func (e *runEnd) goneOrApplied(ctx context.Context, coll *mongo.Collection) error {
	proj := bson.D{{Key: fRuns, Value: 1}, {Key: unloggedPath(e.Record.RunID), Value: 1}}
	raw, err := coll.FindOne(ctx, taskstate.ByID(e.ID), options.FindOne().SetProjection(proj)).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return errRunGone
	case err != nil:
		return fmt.Errorf("mscheduler: read task %q: %w", e.key, err)
	}
	for _, r := range stored.KeptRuns(raw) {
		if r.RunID == e.Record.RunID {
			if r.Outcome == e.Record.Outcome && r.Finished.Equal(e.Record.Finished) {
				return nil
			}
			return errRunGone
		}
	}
	if mark, ok := raw.Lookup(fUnlogged, e.Record.RunID).TimeOK(); ok && mark.Equal(e.Record.Finished) {
		return nil
	}
	return errRunGone
}

// reread reports whether the fence still matches, and refreshes the seen
// state and max_failed_runs (an operator may have changed it). A field it
// needs edited into the wrong type makes the end unwritable as it is.
func (e *runEnd) reread(ctx context.Context, coll *mongo.Collection) (bool, error) {
	raw, err := coll.FindOne(ctx, e.Fence, options.FindOne().SetProjection(taskstate.RefreshProjection())).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mscheduler: read task %q: %w", e.key, err)
	}
	if prob := e.Refresh(raw); prob != nil {
		return true, &unreadableError{key: e.key, prob: prob}
	}
	return true, nil
}
