package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TaskInfo is a task as stored: its parameters and options, and where it
// stands.
type TaskInfo[P any] struct {
	// Task holds the key, params, options, metadata and plan; Task.Run is nil.
	Task                                 Task[P]
	Status                               Status
	Paused                               bool
	Free, Running, Succeeded, FailedRuns int
	// Plan is where the task's plan stands; nil for a task without one.
	Plan                 *PlanInfo
	CreatedAt, UpdatedAt time.Time
}

// PlanInfo is where a task's plan stands.
type PlanInfo struct {
	Planned                 time.Time // the current occurrence
	Runs, Skipped, SkipNext int
}

// Get returns the task with the key, or [ErrNotFound].
func (p *Producer[P]) Get(ctx context.Context, key string) (*TaskInfo[P], error) {
	var doc taskDoc
	err := p.coll.FindOne(ctx, bson.D{{Key: fID, Value: key}}, options.FindOne().SetProjection(bson.D{{Key: fRuns, Value: 0}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: get %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: get %q: %w", key, err)
	}
	return newTaskInfo[P](&doc)
}

// ListOpts selects tasks for List. Empty fields select everything.
type ListOpts struct {
	// Tags selects tasks that carry every one of these tags (served by the
	// tags index).
	Tags []string
	// Statuses selects tasks in any of these statuses.
	Statuses []Status
	// Limit bounds the tasks returned. Defaults to [ListLimitDefault].
	Limit int
}

// ListLimitDefault is the default ListOpts.Limit.
const ListLimitDefault = 100

// List returns the tasks that opts selects, by key.
func (p *Producer[P]) List(ctx context.Context, opts ListOpts) ([]TaskInfo[P], error) {
	filter := bson.D{}
	if len(opts.Tags) > 0 {
		filter = append(filter, bson.E{Key: fTags, Value: op("$all", opts.Tags)})
	}
	if len(opts.Statuses) > 0 {
		filter = append(filter, bson.E{Key: fStatus, Value: op("$in", opts.Statuses)})
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	cur, err := p.coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: fID, Value: 1}}).SetLimit(int64(limit)).SetProjection(bson.D{{Key: fRuns, Value: 0}}))
	if err != nil {
		return nil, fmt.Errorf("mscheduler: list: %w", err)
	}
	var docs []taskDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("mscheduler: list: %w", err)
	}
	out := make([]TaskInfo[P], 0, len(docs))
	for i := range docs {
		info, err := newTaskInfo[P](&docs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *info)
	}
	return out, nil
}

func newTaskInfo[P any](doc *taskDoc) (*TaskInfo[P], error) {
	t, err := decodeTask[P](doc, &activeRun{})
	if err != nil {
		return nil, fmt.Errorf("mscheduler: read %q: %w", doc.Key, err)
	}
	t.Run = nil
	info := &TaskInfo[P]{
		Task: *t, Status: doc.Status, Paused: doc.Paused,
		Free: doc.Free, Running: doc.Running, Succeeded: doc.Succeeded, FailedRuns: doc.FailedRuns,
		CreatedAt: doc.CreatedAt, UpdatedAt: doc.UpdatedAt,
	}
	if pl := doc.Plan; pl != nil {
		info.Plan = &PlanInfo{Planned: pl.Planned, Runs: pl.Runs, Skipped: pl.Skipped, SkipNext: pl.SkipNext}
	}
	return info, nil
}
