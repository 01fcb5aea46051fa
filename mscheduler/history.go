package mscheduler

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Every finished run, whatever its outcome, gets a record in the history
// collection beside the task collection, <name>.runs, keyed by its run id.
// The task document keeps only its most recent runs.
//
// The write that ends a run cannot also write to another collection
// (there are no transactions on every server), so it marks the run's id in
// the task's unlogged map in the same update; the history record is
// inserted after, and the mark removed after that. Both steps are
// idempotent on the run id, so a crash between them neither loses a
// record nor writes one twice: the worker holding the maintenance lease
// finds tasks whose unlogged map is not empty and finishes the copy. (A
// map and $unset, not an array and $pull: the development server's $pull
// cannot take an $in.)

// fUnlogged maps the runs ended on a task whose history record may not be
// written yet to their finish time.
const fUnlogged = "unlogged"

func unloggedPath(runID string) string { return fUnlogged + "." + runID }

// historyCollection is where coll's run records go.
func historyCollection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".runs")
}

// historyDoc is one run in the history collection.
type historyDoc struct {
	ID       string     `bson:"_id"` // the run id
	Key      string     `bson:"key"`
	Record   runRecord  `bson:",inline"`
	ExpireAt *time.Time `bson:"expire_at,omitempty"`
}

func newHistoryDoc(key string, r runRecord, retention Retention) historyDoc {
	return historyDoc{ID: r.RunID, Key: key, Record: r, ExpireAt: retention.runExpiry(r.Outcome, r.Finished)}
}

// historyIndexModels are the indexes Producer.Runs needs.
func historyIndexModels() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: fKey, Value: 1}, {Key: "finished", Value: -1}, {Key: fID, Value: -1}}, Options: options.Index().SetName("key")},
		{Keys: bson.D{{Key: "finished", Value: -1}, {Key: fID, Value: -1}}, Options: options.Index().SetName("finished")},
		{Keys: bson.D{{Key: "worker_id", Value: 1}, {Key: "finished", Value: -1}, {Key: fID, Value: -1}}, Options: options.Index().SetName("worker")},
		{Keys: bson.D{{Key: "outcome", Value: 1}, {Key: "finished", Value: -1}, {Key: fID, Value: -1}}, Options: options.Index().SetName("outcome")},
	}
}

// insertHistory writes run records, ignoring those already written.
func insertHistory(ctx context.Context, coll *mongo.Collection, docs []historyDoc) error {
	if len(docs) == 0 {
		return nil
	}
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if _, err := duplicateIndexes(err); err != nil {
		return fmt.Errorf("mscheduler: write run history: %w", err)
	}
	return nil
}

// pullLogged removes the marks of runs whose history record is written
// from their tasks' unlogged maps, in one command.
func pullLogged(ctx context.Context, coll *mongo.Collection, logged map[string][]string) error {
	if len(logged) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, 0, len(logged))
	for key, ids := range logged {
		unset := make(bson.D, len(ids))
		for i, id := range ids {
			unset[i] = bson.E{Key: unloggedPath(id), Value: ""}
		}
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: fID, Value: key}}).SetUpdate(bson.D{{Key: "$unset", Value: unset}}))
	}
	if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("mscheduler: mark run history written: %w", err)
	}
	return nil
}

// allLogged selects tasks whose every ended run has its history record:
// deletes keep the others until their records are written.
var allLogged = bson.E{Key: fUnlogged, Value: op("$not", op("$gt", bson.D{}))}

// unloggedTask is a task with ended runs whose history records may not be
// written yet: their ids (unlogged) and the records the task keeps.
type unloggedTask struct {
	ID       string       `bson:"_id"`
	Unlogged bson.Raw     `bson:"unlogged"`
	Runs     []bson.Raw   `bson:"runs"`
	Invalid  *invalidNote `bson:"invalid"`
}

// writeUnloggedOf writes the history records that tasks mark as unlogged,
// from the records the tasks keep, and removes the marks. It returns how
// many it wrote.
func writeUnloggedOf(ctx context.Context, coll *mongo.Collection, tasks []unloggedTask, retention Retention, now time.Time) (int, error) {
	var docs []historyDoc
	logged := map[string][]string{}
	for _, t := range tasks {
		kept := map[string]runRecord{}
		for _, raw := range t.Runs {
			var r runRecord
			if bson.Unmarshal(raw, &r) == nil {
				kept[r.RunID] = r
			}
		}
		if t.Invalid != nil && t.Invalid.Run != nil {
			kept[t.Invalid.Run.RunID] = *t.Invalid.Run
		}
		elems, _ := t.Unlogged.Elements()
		for _, e := range elems {
			id := e.Key()
			r, ok := kept[id]
			if !ok { // the task no longer keeps it (RunsKept): say what is known
				r = runRecord{RunID: id, Finished: now, Outcome: "unknown", Error: "the run's record was no longer kept on its task when its history record was written"}
			}
			docs = append(docs, newHistoryDoc(t.ID, r, retention))
			logged[t.ID] = append(logged[t.ID], id)
		}
	}
	if err := insertHistory(ctx, historyCollection(coll), docs); err != nil {
		return 0, err
	}
	return len(docs), pullLogged(ctx, coll, logged)
}

// RunFilter selects run records for Producer.Runs. Empty fields select
// everything.
type RunFilter struct {
	Key      string
	Outcome  Outcome
	WorkerID string
	// Since and Until bound the runs' finish times: Since included, Until
	// not.
	Since, Until time.Time
	// After is the Next of the previous page, to read on from it.
	After string
	// Limit bounds the runs of a page. Defaults to [RunsLimitDefault], at
	// most [RunsLimitMax].
	Limit int
}

// Limits of RunFilter.Limit.
const (
	RunsLimitDefault = 50
	RunsLimitMax     = 1000
)

// RunPage is one page of run records, newest first.
type RunPage struct {
	Runs []RunInfo
	// Next reads the following page (as RunFilter.After); empty on the
	// last page.
	Next string
}

// Runs returns the task collection's run records that f selects, newest
// first, a page at a time. Every filter is served by an index of the
// history collection (by key, worker or outcome, then finish time).
func (p *Producer[P]) Runs(ctx context.Context, f RunFilter) (*RunPage, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = RunsLimitDefault
	case limit < 0 || limit > RunsLimitMax:
		return nil, invalid("Limit", "must be from 1 to %d, got %d", RunsLimitMax, f.Limit)
	}
	filter := bson.D{}
	if f.Key != "" {
		filter = append(filter, bson.E{Key: fKey, Value: f.Key})
	}
	if f.WorkerID != "" {
		filter = append(filter, bson.E{Key: "worker_id", Value: f.WorkerID})
	}
	if f.Outcome != "" {
		filter = append(filter, bson.E{Key: "outcome", Value: f.Outcome})
	}
	finished := bson.D{}
	if !f.Since.IsZero() {
		finished = append(finished, bson.E{Key: "$gte", Value: f.Since})
	}
	if !f.Until.IsZero() {
		finished = append(finished, bson.E{Key: "$lt", Value: f.Until})
	}
	if len(finished) > 0 {
		filter = append(filter, bson.E{Key: "finished", Value: finished})
	}
	if f.After != "" {
		at, id, err := decodeCursor(f.After)
		if err != nil {
			return nil, invalid("After", "is not a cursor this library gave: %v", err)
		}
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "finished", Value: op("$lt", at)}},
			bson.D{{Key: "finished", Value: at}, {Key: fID, Value: op("$lt", id)}},
		}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "finished", Value: -1}, {Key: fID, Value: -1}}).SetLimit(int64(limit + 1))
	cur, err := historyCollection(p.coll).Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	var docs []historyDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	page := &RunPage{Runs: make([]RunInfo, 0, min(len(docs), limit))}
	for i, d := range docs {
		if i == limit {
			last := docs[limit-1]
			page.Next = encodeCursor(last.Record.Finished, last.ID)
			break
		}
		info := newRunInfo(d.Record)
		info.Key = d.Key
		page.Runs = append(page.Runs, info)
	}
	return page, nil
}

func encodeCursor(finished time.Time, runID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(finished.UnixMilli(), 10) + ":" + runID))
}

func decodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", err
	}
	ms, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", errors.New("malformed")
	}
	return time.UnixMilli(n).UTC(), id, nil
}
