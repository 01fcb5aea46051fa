// Package history keeps the run history: every finished run, whatever
// its outcome, gets a record in the history collection beside the task
// collection, <name>.runs, keyed by its run id, while the task keeps only
// its most recent runs.
//
// The write that ends a run cannot also write to another collection
// (there are no transactions on every server), so it marks the run's id in
// the task's unlogged map in the same update; the history record is
// inserted after, and the mark removed after that. Both steps are
// idempotent on the run id, so a crash between them neither loses a
// record nor writes one twice: the worker holding the maintenance lease
// finds tasks whose unlogged map is not empty and finishes the copy
// (WriteMarked). (A map and $unset, not an array and $pull: the
// development server's $pull cannot take an $in.)
package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Collection is where the run records of the task collection coll go.
func Collection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".runs")
}

// Record is the history record of run r of the task key, kept as long as
// retention says.
func Record(key string, r stored.RunRecord, retention taskstate.Retention) stored.HistoryRecord {
	return stored.HistoryRecord{ID: r.RunID, Key: key, Record: r, ExpireAt: retention.RunExpiry(r.Outcome, r.Finished)}
}

// IndexModels are the indexes of the history collection that reading it
// (Producer.Runs) needs.
func IndexModels() []mongo.IndexModel {
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: stored.FKey, Value: 1}, {Key: "finished", Value: -1}, {Key: stored.FID, Value: -1}}, Options: options.Index().SetName("key")},
		{Keys: bson.D{{Key: "finished", Value: -1}, {Key: stored.FID, Value: -1}}, Options: options.Index().SetName("finished")},
		{Keys: bson.D{{Key: "worker_id", Value: 1}, {Key: "finished", Value: -1}, {Key: stored.FID, Value: -1}}, Options: options.Index().SetName("worker")},
		{Keys: bson.D{{Key: "outcome", Value: 1}, {Key: "finished", Value: -1}, {Key: stored.FID, Value: -1}}, Options: options.Index().SetName("outcome")},
	}
}

// Insert writes run records, ignoring those already written. A
// record that finds in its place one of outcome unknown (written by the
// maintenance pass for a run whose task no longer kept its record) takes
// its place: the real outcome wins. The records found in place are
// replaced in one more command, whatever their number: the maintenance
// pass writes the records of runs whose workers died between writing the
// record and removing the mark, and finds them written (in the crash
// trial, batches of 10 to 52 every 10 s, a command each before).
func Insert(ctx context.Context, coll *mongo.Collection, docs []stored.HistoryRecord) error {
	if len(docs) == 0 {
		return nil
	}
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	dups, err := query.DuplicateIndexes(err)
	if err != nil {
		return fmt.Errorf("mscheduler: write run history: %w", err)
	}
	var replaces []mongo.WriteModel
	for i := range docs {
		if !dups[i] || docs[i].Record.Outcome == stored.OutcomeUnknown {
			continue
		}
		filter := bson.D{{Key: stored.FID, Value: docs[i].ID}, {Key: "outcome", Value: stored.OutcomeUnknown}}
		replaces = append(replaces, mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(docs[i]))
	}
	for chunk := range slices.Chunk(replaces, query.MaxStatements) {
		if _, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("mscheduler: write run history: %w", err)
		}
	}
	return nil
}

// pullLogged removes the marks of runs whose history record is written
// from their tasks' unlogged maps, in one command.
func pullLogged(ctx context.Context, coll *mongo.Collection, logged map[string][]string) error {
	return SendPulls(ctx, coll, Pulls(logged))
}

// Pulls are the statements that remove the marks of logged (by
// task key), a statement per task.
func Pulls(logged map[string][]string) []mongo.WriteModel {
	models := make([]mongo.WriteModel, 0, len(logged))
	for key, ids := range logged {
		filter, update := taskstate.MarksWritten(taskstate.KeyID(key), ids)
		models = append(models, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
	}
	return models
}

// SendPulls sends statements of Pulls, in commands of at most
// query.MaxStatements.
func SendPulls(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	for chunk := range slices.Chunk(models, query.MaxStatements) {
		if _, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("mscheduler: mark run history written: %w", err)
		}
	}
	return nil
}

// MarksProjection is what writing a task's unwritten history records
// (WriteMarked) reads of it.
var MarksProjection = bson.D{{Key: stored.FUnlogged, Value: 1}, {Key: stored.FRuns, Value: 1}, {Key: stored.FInvalid, Value: 1}}

// WriteMarked writes the history records that tasks (read with
// MarksProjection) mark as unlogged, from the records the tasks keep,
// and removes the marks. Only marks older than minAge are written (zero:
// all): a newer one is its worker's to write. Each task is read record by
// record: one edited out of shape (runs not an array, a record that does
// not decode) still has its marks written, its runs' records as
// unknown, and never stops the others. It returns how many it wrote.
func WriteMarked(ctx context.Context, coll *mongo.Collection, tasks []bson.Raw, retention taskstate.Retention, now time.Time, minAge time.Duration) (int, error) {
	var docs []stored.HistoryRecord
	logged := map[string][]string{} // by rawKey of the _id
	var ids []bson.RawValue
	for _, raw := range tasks {
		id := raw.Lookup(stored.FID)
		key := stored.IDString(id)
		kept := map[string]stored.RunRecord{}
		for _, r := range stored.KeptRuns(raw) {
			kept[r.RunID] = r
		}
		var note stored.InvalidNote
		if raw.Lookup(stored.FInvalid, "run").Unmarshal(&note.Run) == nil && note.Run != nil {
			kept[note.Run.RunID] = *note.Run
		}
		for runID, at := range stored.Marks(raw) {
			if minAge > 0 && !at.IsZero() && now.Sub(at) < minAge {
				continue
			}
			r, ok := kept[runID]
			if !ok { // the task no longer keeps it (RunsKept): say what is known
				r = stored.RunRecord{RunID: runID, Finished: now, Outcome: stored.OutcomeUnknown, Error: "the run's record was no longer kept on its task when its history record was written"}
			}
			docs = append(docs, Record(key, r, retention))
			if _, seen := logged[rawKey(id)]; !seen {
				ids = append(ids, id)
			}
			logged[rawKey(id)] = append(logged[rawKey(id)], runID)
		}
	}
	if err := Insert(ctx, Collection(coll), docs); err != nil {
		return 0, err
	}
	models := make([]mongo.WriteModel, 0, len(ids))
	for _, id := range ids {
		filter, update := taskstate.MarksWritten(id, logged[rawKey(id)])
		models = append(models, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
	}
	return len(docs), SendPulls(ctx, coll, models)
}

// rawKey is a stored value as a map key.
func rawKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }
