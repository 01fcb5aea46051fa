package mscheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
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

func unloggedPath(runID string) string { return stored.UnloggedPath(runID) }

// historyCollection is where coll's run records go.
func historyCollection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".runs")
}

// historyDoc is one run in the history collection.
type historyDoc = stored.HistoryRecord

func newHistoryDoc(key string, r runRecord, retention Retention) historyDoc {
	return historyDoc{ID: r.RunID, Key: key, Record: r, ExpireAt: retention.policy().RunExpiry(r.Outcome, r.Finished)}
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

// insertHistory writes run records, ignoring those already written. A
// record that finds in its place one of outcome unknown (written by the
// maintenance pass for a run whose task no longer kept its record) takes
// its place: the real outcome wins. Such a record is rare, so only a
// duplicate costs a command of its own.
func insertHistory(ctx context.Context, coll *mongo.Collection, docs []historyDoc) error {
	if len(docs) == 0 {
		return nil
	}
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	dups, err := duplicateIndexes(err)
	if err != nil {
		return fmt.Errorf("mscheduler: write run history: %w", err)
	}
	for i := range dups {
		if docs[i].Record.Outcome == OutcomeUnknown {
			continue
		}
		filter := bson.D{{Key: fID, Value: docs[i].ID}, {Key: "outcome", Value: OutcomeUnknown}}
		if _, err := coll.ReplaceOne(ctx, filter, docs[i]); err != nil {
			return fmt.Errorf("mscheduler: write run history: %w", err)
		}
	}
	return nil
}

// pullLogged removes the marks of runs whose history record is written
// from their tasks' unlogged maps, in one command.
func pullLogged(ctx context.Context, coll *mongo.Collection, logged map[string][]string) error {
	return sendPulls(ctx, coll, pullStatements(logged))
}

// pullStatements are the statements that remove the marks of logged (by
// task key), a statement per task.
func pullStatements(logged map[string][]string) []mongo.WriteModel {
	models := make([]mongo.WriteModel, 0, len(logged))
	for key, ids := range logged {
		filter, update := taskstate.MarksWritten(taskstate.KeyID(key), ids)
		models = append(models, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
	}
	return models
}

// maxPullStatements bounds the statements of one command that removes
// history marks: FerretDB keeps a pool connection per statement of an
// update until the command ends, and a command of more statements than
// its pool holds (100 on SQLite) waits forever, and with it every command
// behind it at the development server's front.
const maxPullStatements = 64

// sendPulls sends statements of pullStatements, in commands of at most
// maxPullStatements.
func sendPulls(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	for chunk := range slices.Chunk(models, maxPullStatements) {
		if _, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("mscheduler: mark run history written: %w", err)
		}
	}
	return nil
}

// allLogged selects tasks whose every ended run has its history record:
// deletes keep the others until their records are written.
var allLogged = taskstate.AllLogged

// unloggedProjection is what writing a task's unwritten history records
// reads of it.
var unloggedProjection = bson.D{{Key: fUnlogged, Value: 1}, {Key: fRuns, Value: 1}, {Key: fInvalid, Value: 1}}

// writeUnloggedOf writes the history records that tasks (read with
// unloggedProjection) mark as unlogged, from the records the tasks keep,
// and removes the marks. Only marks older than minAge are written (zero:
// all): a newer one is its worker's to write. Each task is read record by
// record: one edited out of shape (runs not an array, a record that does
// not decode) still has its marks written, its runs' records as
// unknown, and never stops the others. It returns how many it wrote.
func writeUnloggedOf(ctx context.Context, coll *mongo.Collection, tasks []bson.Raw, retention Retention, now time.Time, minAge time.Duration) (int, error) {
	var docs []historyDoc
	logged := map[string][]string{} // by rawKey of the _id
	var ids []bson.RawValue
	for _, raw := range tasks {
		id := raw.Lookup(fID)
		key := stored.IDString(id)
		kept := map[string]runRecord{}
		for _, r := range stored.KeptRuns(raw) {
			kept[r.RunID] = r
		}
		var note invalidNote
		if raw.Lookup(fInvalid, "run").Unmarshal(&note.Run) == nil && note.Run != nil {
			kept[note.Run.RunID] = *note.Run
		}
		for runID, at := range stored.Marks(raw) {
			if minAge > 0 && !at.IsZero() && now.Sub(at) < minAge {
				continue
			}
			r, ok := kept[runID]
			if !ok { // the task no longer keeps it (RunsKept): say what is known
				r = runRecord{RunID: runID, Finished: now, Outcome: OutcomeUnknown, Error: "the run's record was no longer kept on its task when its history record was written"}
			}
			docs = append(docs, newHistoryDoc(key, r, retention))
			if _, seen := logged[rawKey(id)]; !seen {
				ids = append(ids, id)
			}
			logged[rawKey(id)] = append(logged[rawKey(id)], runID)
		}
	}
	if err := insertHistory(ctx, historyCollection(coll), docs); err != nil {
		return 0, err
	}
	models := make([]mongo.WriteModel, 0, len(ids))
	for _, id := range ids {
		filter, update := taskstate.MarksWritten(id, logged[rawKey(id)])
		models = append(models, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update))
	}
	return len(docs), sendPulls(ctx, coll, models)
}

// rawKey is a stored value as a map key.
func rawKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

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
// history collection (by key, worker or outcome, then finish time). A
// record that cannot be read as stored does not fail the call: it is
// listed with what could be read, and its RunInfo.Problem.
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
	base := slices.Clip(filter)
	var after runPos
	if f.After != "" {
		var err error
		if after, err = decodeCursor(f.After); err != nil {
			return nil, invalid("After", "is not a cursor this library gave: %v", err)
		}
		filter = append(base, bson.E{Key: "$or", Value: after.after()})
	}
	raws, err := p.findRuns(ctx, filter, limit+1)
	if err != nil {
		return nil, err
	}
	// The filter after a sound record's cursor compares dates with dates,
	// as it always did. Records whose finished is not a date (edited by
	// hand) sort after every date: once the dates are read, read on into
	// them. (Since and Until select dates only.)
	if f.After != "" && after.sound() && len(raws) <= limit && f.Since.IsZero() && f.Until.IsZero() {
		more, err := p.findRuns(ctx, append(base, bson.E{Key: "$or", Value: belowBracket(rankOf(bson.TypeDateTime))}), limit+1-len(raws))
		if err != nil {
			return nil, err
		}
		raws = append(raws, more...)
	}
	page := &RunPage{Runs: make([]RunInfo, 0, min(len(raws), limit))}
	for i, raw := range raws {
		if i == limit {
			page.Next = encodeCursor(posOf(raws[limit-1]))
			if page.Next == f.After { // cannot happen with a strict filter; never loop on it
				page.Next = ""
			}
			break
		}
		info, prob := readHistoryRecord(raw)
		if prob != nil {
			info.Problem = prob.Error()
		}
		page.Runs = append(page.Runs, info)
	}
	return page, nil
}

// findRuns reads up to n history records, in the order of Runs, as stored.
func (p *Producer[P]) findRuns(ctx context.Context, filter bson.D, n int) ([]bson.Raw, error) {
	cur, err := findPage(ctx, historyCollection(p.coll), pageQuery{filter: filter,
		sort: bson.D{{Key: "finished", Value: -1}, {Key: fID, Value: -1}}, limit: int64(n)})
	if err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	return raws, nil
}

// readHistoryRecord reads a record of the history collection for Runs,
// through the gate. It never fails: a field that does not decode is left
// zero, and the problem names the first such field, or else a finish
// time that is not a date.
func readHistoryRecord(raw bson.Raw) (RunInfo, *problem) {
	d, prob := stored.DecodeHistory(raw)
	info := newRunInfo(d.Record)
	info.Key = d.Key
	return info, prob
}
