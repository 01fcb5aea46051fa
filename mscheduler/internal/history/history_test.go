package history_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

var keep = taskstate.Retention{Succeeded: time.Hour, Failed: time.Hour}

// TestTheRealRecordReplacesAnUnknownOne: a record written for a run whose
// task no longer kept its record (outcome unknown) yields to the real one,
// written after it; a real one is never replaced.
func TestTheRealRecordReplacesAnUnknownOne(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	unknown := history.Record("k", stored.RunRecord{RunID: "r1", Finished: now, Outcome: stored.OutcomeUnknown}, keep)
	real := history.Record("k", stored.RunRecord{RunID: "r1", WorkerID: "w", Finished: now, Outcome: stored.OutcomeSucceeded}, keep)
	other := history.Record("k", stored.RunRecord{RunID: "r1", Finished: now, Outcome: stored.OutcomeFailed}, keep)
	for _, batch := range [][]stored.HistoryRecord{{unknown}, {real}, {other}, {unknown}} {
		if err := history.Insert(ctx, history.Collection(coll), batch); err != nil {
			t.Fatal(err)
		}
	}
	var got stored.HistoryRecord
	if err := history.Collection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: "r1"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Record.Outcome != stored.OutcomeSucceeded || got.Record.WorkerID != "w" {
		t.Fatalf("history holds %+v, want the real (succeeded) record", got.Record)
	}
}

// TestRecordsFoundInPlaceAreReplacedInOneCommand: a batch of records
// of which five find unknown ones in their place and one is new costs one
// insert and one update, and leaves the real outcomes.
func TestRecordsFoundInPlaceAreReplacedInOneCommand(t *testing.T) {
	var mu sync.Mutex
	sent := map[string]int{} // commands on the history collection, by name
	var runs string
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, ok := e.Command.Lookup(e.CommandName).StringValueOK(); ok && coll == runs {
			mu.Lock()
			sent[e.CommandName]++
			mu.Unlock()
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(mschedulertest.URI()).SetMonitor(monitor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := history.Collection(mschedulertest.CollectionOf(t, client))
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	var unknown, real []stored.HistoryRecord
	for i := range 5 {
		id := fmt.Sprintf("r%d", i)
		unknown = append(unknown, history.Record("k", stored.RunRecord{RunID: id, Finished: now, Outcome: stored.OutcomeUnknown}, keep))
		real = append(real, history.Record("k", stored.RunRecord{RunID: id, WorkerID: "w", Finished: now, Outcome: stored.OutcomeSucceeded}, keep))
	}
	real = append(real, history.Record("k", stored.RunRecord{RunID: "new", WorkerID: "w", Finished: now, Outcome: stored.OutcomeFailed}, keep))
	if err := history.Insert(ctx, coll, unknown); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	runs, sent = coll.Name(), map[string]int{}
	mu.Unlock()
	if err := history.Insert(ctx, coll, real); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if sent["insert"] != 1 || sent["update"] != 1 || len(sent) != 2 {
		t.Errorf("commands sent: %v, want one insert and one update", sent)
	}
	mu.Unlock()
	for _, want := range real {
		var got stored.HistoryRecord
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: want.ID}}).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Record.Outcome != want.Record.Outcome || got.Record.WorkerID != "w" {
			t.Errorf("record %s holds %+v, want outcome %s", want.ID, got.Record, want.Record.Outcome)
		}
	}
}

// TestWriteMarkedReadsEachTaskAlone: the marks of a task whose runs is not
// an array are written as unknown records, the others from the records
// their tasks keep, and a mark younger than minAge is left to its worker.
func TestWriteMarkedReadsEachTaskAlone(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	old, fresh := now.Add(-time.Minute), now.Add(-time.Second)
	docs := []any{
		bson.D{{Key: "_id", Value: "good"}, {Key: "unlogged", Value: bson.D{{Key: "g1", Value: old}, {Key: "g2", Value: fresh}}},
			{Key: "runs", Value: bson.A{stored.RunRecord{RunID: "g1", Finished: old, Outcome: stored.OutcomeFailed}, stored.RunRecord{RunID: "g2", Finished: fresh, Outcome: stored.OutcomeSucceeded}}}},
		bson.D{{Key: "_id", Value: "junk"}, {Key: "unlogged", Value: bson.D{{Key: "j1", Value: old}}}, {Key: "runs", Value: "junk"}},
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var raws []bson.Raw
	for _, id := range []string{"good", "junk"} {
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
	}
	n, err := history.WriteMarked(ctx, coll, raws, keep, now, 10*time.Second)
	if err != nil || n != 2 {
		t.Fatalf("WriteMarked = %d, %v; want the 2 old marks written", n, err)
	}
	outcomes := map[string]stored.Outcome{}
	cur, err := history.Collection(coll).Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []stored.HistoryRecord
	if err := cur.All(ctx, &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		outcomes[r.ID] = r.Record.Outcome
	}
	if outcomes["g1"] != stored.OutcomeFailed || outcomes["j1"] != stored.OutcomeUnknown || len(outcomes) != 2 {
		t.Fatalf("history %v, want g1 failed and j1 unknown, g2 left to its worker", outcomes)
	}
	left, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "good"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if marks := stored.Marks(left); len(marks) != 1 || marks["g2"].IsZero() {
		t.Fatalf("marks left %v, want only g2's", marks)
	}
}
