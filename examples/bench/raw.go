package main

// The raw limit: a plain driver loop that does, per task, the writes the
// library does: one insert, one claim (findOneAndUpdate shaped like the
// library's: pending and due, highest priority then earliest run_at, sets
// the status and a holder entry, moves the counters), one completion (an
// update fenced on the run id that records the run). Its documents are
// copies of one the library wrote, on a collection with the library's
// indexes, written with the library's default write concern (majority).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"golang.org/x/sync/errgroup"
)

// leaseLength is the lease a raw claim takes, as the library's claim does.
const leaseLength = 30 * time.Second

// rawCollection is name on client with the library's write concern.
func rawCollection(client *mongo.Client, name string) *mongo.Collection {
	return client.Database(database).Collection(name, options.Collection().SetWriteConcern(writeconcern.Majority()))
}

func taskKey(i int) string { return fmt.Sprintf("task-%06d", i) }

// rawEndToEnd inserts the tasks one by one, then drains them with
// workers×capacity goroutines, each worker's goroutines sharing a client.
func rawEndToEnd(ctx context.Context, e *env, workers, round int) (runStats, error) {
	name := fmt.Sprintf("raw_w%d_r%d", workers, round)
	if err := e.freshCollection(ctx, name); err != nil {
		return runStats{}, err
	}
	cmds := newCommands()
	clients, err := e.clients(ctx, workers+1, cmds) // the last one publishes
	if err != nil {
		return runStats{}, err
	}
	defer disconnect(clients...)

	st := runStats{Tasks: e.cfg.Tasks}
	cmds.start()
	cpu0, cpuOK := cpuTime()
	start := time.Now()
	if err := rawInsertOne(ctx, e, rawCollection(clients[workers], name), 0, e.cfg.Tasks, time.Time{}); err != nil {
		return st, err
	}
	st.Publish = time.Since(start)

	// The run ends with the last completion, as the library's ends with its
	// last success: the goroutines' final empty claims that started before
	// it are counted, those after it are not.
	drainStart := time.Now()
	var succeeded atomic.Int64
	completed := func() {
		if succeeded.Add(1) == int64(e.cfg.Tasks) {
			st.Drain = time.Since(drainStart)
			st.CPU = cpuSince(cpu0, cpuOK)
			cmds.snapshot(&st)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		coll := rawCollection(clients[w], name)
		workerID := fmt.Sprintf("raw-%d", w)
		for range e.cfg.Capacity {
			g.Go(func() error { return rawWorkLoop(gctx, e.cfg.Stall, coll, workerID, completed) })
		}
	}
	err = g.Wait()
	st.Succeeded = int(succeeded.Load())
	if err != nil {
		return st, err
	}
	if st.Succeeded != e.cfg.Tasks {
		return st, fmt.Errorf("%d of %d tasks completed", st.Succeeded, e.cfg.Tasks)
	}
	if err := checkSucceeded(ctx, e.db.Collection(name), e.cfg.Tasks); err != nil {
		return st, err
	}
	if err := e.dropCollection(ctx, name); err != nil {
		return st, err
	}
	e.say("raw loop, round %d, %d×%d goroutines: %d tasks in %s (insert %s, drain %s)", round+1, workers, e.cfg.Capacity, st.Succeeded,
		st.total().Round(time.Millisecond), st.Publish.Round(time.Millisecond), st.Drain.Round(time.Millisecond))
	return st, nil
}

// rawWorkLoop claims and completes tasks until none is left, calling
// completed after each completion.
func rawWorkLoop(ctx context.Context, stall time.Duration, coll *mongo.Collection, workerID string, completed func()) error {
	for {
		id, runID, started, err := rawClaim(ctx, stall, coll, workerID)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil
		}
		if err != nil {
			return err
		}
		ok, err := rawComplete(ctx, stall, coll, workerID, id, runID, started)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("completion of run %s of %v matched nothing", runID, id)
		}
		completed()
	}
}

// rawClaim claims the best due task for workerID.
func rawClaim(ctx context.Context, stall time.Duration, coll *mongo.Collection, workerID string) (id any, runID string, now time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, stall)
	defer cancel()
	now = time.Now().Truncate(time.Millisecond)
	runID = uuid.NewString()
	filter := bson.D{{Key: "status", Value: "pending"}, {Key: "run_at", Value: bson.D{{Key: "$lte", Value: now}}}}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "status", Value: "running"},
			{Key: "holders." + workerID, Value: bson.D{
				{Key: "run", Value: runID}, {Key: "started", Value: now}, {Key: "lease_until", Value: now.Add(leaseLength)},
			}},
			{Key: "updated_at", Value: now},
		}},
		{Key: "$inc", Value: bson.D{{Key: "free", Value: -1}, {Key: "running", Value: 1}, {Key: "rev", Value: 1}}},
		{Key: "$min", Value: bson.D{{Key: "next_expiry", Value: now.Add(leaseLength)}}},
	}
	opts := options.FindOneAndUpdate().
		SetSort(bson.D{{Key: "priority", Value: -1}, {Key: "run_at", Value: 1}}).
		SetReturnDocument(options.After)
	var doc bson.Raw
	if err := coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&doc); err != nil {
		return nil, "", now, err
	}
	return doc.Lookup("_id"), runID, now, nil
}

// rawComplete records a successful run, fenced on the run id.
func rawComplete(ctx context.Context, stall time.Duration, coll *mongo.Collection, workerID string, id any, runID string, started time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, stall)
	defer cancel()
	now := time.Now().Truncate(time.Millisecond)
	record := bson.D{
		{Key: "run_id", Value: runID}, {Key: "worker_id", Value: workerID}, {Key: "started", Value: started},
		{Key: "lease_until", Value: started.Add(leaseLength)}, {Key: "finished", Value: now},
		{Key: "outcome", Value: "succeeded"}, {Key: "attempts", Value: 1}, {Key: "result", Value: bson.D{}},
	}
	filter := bson.D{{Key: "_id", Value: id}, {Key: "holders." + workerID + ".run", Value: runID}}
	update := bson.D{
		{Key: "$unset", Value: bson.D{{Key: "holders." + workerID, Value: ""}, {Key: "next_expiry", Value: ""}}},
		{Key: "$inc", Value: bson.D{{Key: "running", Value: -1}, {Key: "rev", Value: 1}, {Key: "succeeded", Value: 1}}},
		{Key: "$push", Value: bson.D{{Key: "runs", Value: bson.D{{Key: "$each", Value: bson.A{record}}, {Key: "$slice", Value: -20}}}}},
		{Key: "$set", Value: bson.D{{Key: "updated_at", Value: now}, {Key: "status", Value: "succeeded"}}},
	}
	res, err := coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, err
	}
	return res.MatchedCount == 1, nil
}

// rawInsertOne inserts tasks from..from+n-1 one document per command. A
// zero runAt means now.
func rawInsertOne(ctx context.Context, e *env, coll *mongo.Collection, from, n int, runAt time.Time) error {
	for i := from; i < from+n; i++ {
		now := time.Now().Truncate(time.Millisecond)
		if _, err := coll.InsertOne(ctx, e.taskDoc(taskKey(i), orNow(runAt, now), now)); err != nil {
			return fmt.Errorf("insert %s: %w", taskKey(i), err)
		}
	}
	return nil
}

// rawInsertMany inserts n tasks in batches. A zero runAt means now.
func rawInsertMany(ctx context.Context, e *env, coll *mongo.Collection, n, batch int, runAt time.Time) error {
	for from := 0; from < n; from += batch {
		now := time.Now().Truncate(time.Millisecond)
		docs := make([]any, 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			docs = append(docs, e.taskDoc(taskKey(i), orNow(runAt, now), now))
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("insertMany at %d: %w", from, err)
		}
	}
	return nil
}

// rawUpsertOne writes n tasks as upserts by _id with $setOnInsert, one
// update command each: the write Publish sends, without the library.
func rawUpsertOne(ctx context.Context, e *env, coll *mongo.Collection, n int) error {
	for i := range n {
		now := time.Now().Truncate(time.Millisecond)
		doc := e.taskDoc(taskKey(i), now, now)
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: taskKey(i)}},
			bson.D{{Key: "$setOnInsert", Value: withoutID(doc)}}, options.UpdateOne().SetUpsert(true))
		if err != nil {
			return fmt.Errorf("upsert %s: %w", taskKey(i), err)
		}
	}
	return nil
}

// rawBulkUpsert writes n tasks in batches as upserts by _id with
// $setOnInsert, the write PublishMany sends, without the library around it.
func rawBulkUpsert(ctx context.Context, e *env, coll *mongo.Collection, n, batch int) error {
	for from := 0; from < n; from += batch {
		now := time.Now().Truncate(time.Millisecond)
		models := make([]mongo.WriteModel, 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			doc := e.taskDoc(taskKey(i), now, now)
			models = append(models, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: taskKey(i)}}).
				SetUpdate(bson.D{{Key: "$setOnInsert", Value: withoutID(doc)}}).
				SetUpsert(true))
		}
		if _, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("bulk upsert at %d: %w", from, err)
		}
	}
	return nil
}

// withoutID is doc less its _id, which an upsert takes from its filter.
func withoutID(doc bson.D) bson.D {
	out := make(bson.D, 0, len(doc))
	for _, f := range doc {
		if f.Key != "_id" {
			out = append(out, f)
		}
	}
	return out
}

func orNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}
