package upkeep

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Worker is one worker's upkeep of a task collection.
type Worker struct {
	Coll      *mongo.Collection
	ID        string // the worker's id
	Clock     *serverclock.Clock
	RunsKept  int
	Retention taskstate.Retention
	History   *history.Historian
	Log       *slog.Logger
	// Inspect is the gate's verdict on a task, with what the consumer
	// knows besides (a plan that no longer compiles).
	Inspect func(raw bson.Raw) *stored.Problem
	// Advance prepares the move of a task with a plan to its next planned
	// time, for the end of a lapsed run (nil for a task without one).
	Advance func(t *stored.Task, started, now time.Time) *taskstate.Advance
	Report  Report
}

// Report hears of what the upkeep does, for the consumer's logs, events
// and wakes.
type Report struct {
	// Invalid: a task was set invalid (run, worker: the run it ended).
	Invalid func(key, runID, workerID string, err error)
	// Expired: a lapsed run of another worker was recorded expired; its
	// lease lapsed at lapsed.
	Expired func(key, runID, workerID string, lapsed time.Time)
	// Error: a background operation failed.
	Error func(err error)
	// Wake: something may have become claimable.
	Wake func()
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

// ServerMessage is the server's message of an error, without the driver's
// wrapping.
func ServerMessage(err error) string {
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
