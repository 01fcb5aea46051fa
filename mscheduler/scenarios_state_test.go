package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Regression tests for task documents that end up in states the library
// must not leave them in: a live task deleted by retention, documents
// whose _id or key is not the task's key, stuck documents that starve the
// sweep, and a runs field that is not an array.

// stBound bounds each wait of these tests: a failing test fails within it.
const stBound = 45 * time.Second

// stWait polls cond every 20 ms until it holds; after timeout it fails
// the test with what, and cond's last description of the state.
func stWait(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, state)
		}
	}
}

// stRaw reads a document by _id as a map; nil if there is none.
func stRaw(t *testing.T, coll *mongo.Collection, id any) bson.M {
	t.Helper()
	var m bson.M
	err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		t.Fatalf("read %v: %v", id, err)
	}
	return m
}

// stDocD reads a document by _id as stored, in order, to copy it.
func stDocD(t *testing.T, coll *mongo.Collection, id any) bson.D {
	t.Helper()
	var d bson.D
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("read %v: %v", id, err)
	}
	return d
}

// stWith is a copy of d with field set to v (added if missing); v of
// stDrop removes it.
func stWith(d bson.D, field string, v any) bson.D {
	out := make(bson.D, 0, len(d)+1)
	found := false
	for _, e := range d {
		if e.Key == field {
			found = true
			if _, drop := v.(stDropField); drop {
				continue
			}
			e.Value = v
		}
		out = append(out, e)
	}
	if _, drop := v.(stDropField); !found && !drop {
		out = append(out, bson.E{Key: field, Value: v})
	}
	return out
}

type stDropField struct{}

var stDrop = stDropField{}

// stState describes a task document briefly, for failure messages.
func stState(m bson.M) string {
	if m == nil {
		return "<no document>"
	}
	return fmt.Sprintf("_id=%v key=%v status=%v running=%v free=%v holders=%v next_expiry=%v expire_at=%v invalid=%v",
		m["_id"], m["key"], m["status"], m["running"], m["free"], m["holders"], m["next_expiry"], m["expire_at"], m["invalid"])
}

// stTask is what these tests check of a task document.
type stTask struct {
	Status    string         `bson:"status"`
	Running   int            `bson:"running"`
	Succeeded int            `bson:"succeeded"`
	Holders   map[string]any `bson:"holders"`
	ExpireAt  *time.Time     `bson:"expire_at"`
	Invalid   *struct {
		Field string `bson:"field"`
	} `bson:"invalid"`
	Plan struct {
		Planned time.Time `bson:"planned"`
	} `bson:"plan"`
}

// stRead reads a task document by _id for checks, and its state for
// failure messages; ok is false if there is none.
func stRead(t *testing.T, coll *mongo.Collection, id any) (st stTask, state string, ok bool) {
	t.Helper()
	m := stRaw(t, coll, id)
	if m == nil {
		return stTask{}, stState(nil), false
	}
	b, err := bson.Marshal(m)
	if err == nil {
		err = bson.Unmarshal(b, &st)
	}
	if err != nil {
		t.Fatalf("decode %v: %v (%s)", id, err, stState(m))
	}
	return st, stState(m), true
}

// invalidOn reports whether the task is invalid naming field, with no
// holder and no run going.
func (st stTask) invalidOn(field string) bool {
	return st.Status == "invalid" && st.Invalid != nil && st.Invalid.Field == field && len(st.Holders) == 0 && st.Running == 0
}

// stLastError is the last error event, for failure messages.
func stLastError(ev *mschedulertest.Events) string {
	evs := ev.Snapshot()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == mscheduler.EventError {
			return fmt.Sprint(evs[i].Err)
		}
	}
	return "none"
}

// TestScenario1RetentionKeepsLiveRecurringTask: scenario 1, retention
// deletes a live recurring task. A run of a planned task of concurrency 2
// fails (MaxFailedRuns 1) while its other run goes on: the task is set
// failed, with expire_at. The other run's end moves the plan on to its
// next planned time: expire_at must go with it, the task must not be
// deleted by the maintenance pass, and its next planned time must run.
func TestScenario1RetentionKeepsLiveRecurringTask(t *testing.T) {
	coll := mschedulertest.Collection(t)
	retention := mscheduler.Retention{Failed: 100 * time.Millisecond}
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Retention: retention})
	plan := mscheduler.Every(3, mscheduler.Second)
	plan.Repeat = 5
	task := mscheduler.Task[int]{Key: "rec", Plan: &plan, Concurrency: 2, MaxFailedRuns: 1, MaxRetries: mscheduler.NoRetries}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	var first struct {
		Plan struct {
			Planned time.Time `bson:"planned"`
		} `bson:"plan"`
	}
	if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "rec"}}).Decode(&first); err != nil {
		t.Fatal(err)
	}

	// Each of the first occurrence's two runs waits for the test to say
	// how it ends; runs of later occurrences succeed at once.
	entered := make(chan string, 2)
	release := map[string]chan error{"sa": make(chan error, 1), "sb": make(chan error, 1)}
	var later atomic.Bool
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if later.Load() {
			return 1, nil
		}
		entered <- task.Run.WorkerID
		select {
		case err := <-release[task.Run.WorkerID]:
			return 0, err
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	ev := mschedulertest.NewEvents()
	for _, w := range []string{"sa", "sb"} {
		cfg := fastConfig(w, ev)
		cfg.Capacity = 1
		cfg.Retention = retention
		cfg.MaintenanceInterval = 100 * time.Millisecond
		startConsumer(t, coll, handler, cfg)
	}
	var workers []string
	timeout := time.After(stBound)
	for len(workers) < 2 {
		select {
		case w := <-entered:
			workers = append(workers, w)
		case <-timeout:
			t.Fatalf("timed out waiting for both runs of the first planned time to start; started %v, events %v", workers, mschedulertest.Summarize(ev.Snapshot()))
		}
	}
	failing, going := workers[0], workers[1]

	// One run fails, using up MaxFailedRuns, while the other is still going.
	release[failing] <- errors.New("this run fails")
	ev.WaitCountWithin(t, stBound, mscheduler.EventFailed, 1)
	t.Logf("after the failed run: %s", stState(stRaw(t, coll, "rec")))

	// The other run's end moves the plan on.
	later.Store(true)
	release[going] <- nil
	var next time.Time
	stWait(t, stBound, "the plan to move on to its next planned time", func() (bool, string) {
		doc, state, ok := stRead(t, coll, "rec")
		if !ok {
			t.Fatalf("the recurring task was deleted by retention while its plan still had planned times (the failed occurrence's expire_at was left on it)")
		}
		next = doc.Plan.Planned
		return doc.Status == "pending" && doc.Plan.Planned.After(first.Plan.Planned), state
	})
	if doc, _, ok := stRead(t, coll, "rec"); ok && doc.ExpireAt != nil {
		t.Errorf("the plan moved on to %s (status %s) but expire_at %s was left on the task: retention will delete it", next, doc.Status, doc.ExpireAt)
	}

	// It is never deleted, and its next planned time runs.
	stWait(t, stBound, "a run of the next planned time to succeed", func() (bool, string) {
		_, state, ok := stRead(t, coll, "rec")
		if !ok {
			t.Fatalf("the live recurring task was deleted by retention (maintenance pass) after its plan moved on to %s", next)
		}
		for _, e := range ev.Snapshot() {
			if e.Kind == mscheduler.EventSucceeded && e.Key == "rec" && !e.Planned.Before(next) {
				return true, ""
			}
		}
		return false, state
	})
	if _, _, ok := stRead(t, coll, "rec"); !ok {
		t.Fatal("the recurring task was deleted")
	}
}

// TestScenario2ClonedDocumentWithObjectIDIsSetInvalid: scenario 2, a
// pending task's document cloned in Compass (no _id: the server gives it
// an ObjectId, the key field the same). It must end invalid naming _id,
// with no holder and no run going, not held running for ever; the
// original task runs normally.
func TestScenario2ClonedDocumentWithObjectIDIsSetInvalid(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "orig", PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := coll.InsertOne(ctxT(t), stWith(stDocD(t, coll, "orig"), "_id", stDrop))
	if err != nil {
		t.Fatalf("insert the clone: %v", err)
	}
	cloneID := res.InsertedID
	if _, ok := cloneID.(bson.ObjectID); !ok {
		t.Fatalf("the clone's _id is %T %v, want an ObjectId", cloneID, cloneID)
	}

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 1 // single-slot claims
	cfg.CheckInterval = 200 * time.Millisecond
	cfg.MaintenanceInterval = 100 * time.Millisecond
	var ran atomic.Int32
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { ran.Add(1); return 1, nil }, cfg)

	stWait(t, stBound, "the clone to be set invalid on _id (no holder, running 0) and the original to succeed", func() (bool, string) {
		clone, cloneState, _ := stRead(t, coll, cloneID)
		orig, origState, _ := stRead(t, coll, "orig")
		return clone.invalidOn("_id") && orig.Status == "succeeded",
			fmt.Sprintf("clone: %s; original: %s; handler calls %d; last error %s", cloneState, origState, ran.Load(), stLastError(ev))
	})
	if orig, state, _ := stRead(t, coll, "orig"); orig.Succeeded != 1 {
		t.Errorf("original succeeded %d times, want 1: %s", orig.Succeeded, state)
	}
}

// TestScenario3KeyFieldOtherThanIDIsSetInvalid: scenario 3, a clone given
// a new string _id but the old key field. Every write about its runs is
// fenced on {_id: <key field>}, so it would stay running for ever: it must
// be set invalid naming key, and the original task with that key must
// still run and succeed once.
func TestScenario3KeyFieldOtherThanIDIsSetInvalid(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "orig", PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctxT(t), stWith(stDocD(t, coll, "orig"), "_id", "copy-1")); err != nil {
		t.Fatalf("insert the clone: %v", err)
	}

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 1
	cfg.CheckInterval = 200 * time.Millisecond
	cfg.MaintenanceInterval = 100 * time.Millisecond
	var ran atomic.Int32
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { ran.Add(1); return 1, nil }, cfg)

	stWait(t, stBound, "the clone copy-1 to be set invalid on key (not running) and the original to succeed", func() (bool, string) {
		clone, cloneState, _ := stRead(t, coll, "copy-1")
		orig, origState, _ := stRead(t, coll, "orig")
		return clone.invalidOn("key") && orig.Status == "succeeded", fmt.Sprintf("clone: %s; original: %s; handler calls %d; lease lost events %d", cloneState, origState, ran.Load(), ev.Count(mscheduler.EventLeaseLost))
	})
	orig := readTask(t, coll, "orig")
	succeeded := 0
	for _, r := range orig.Runs {
		if r.Outcome == "succeeded" {
			succeeded++
		}
	}
	if orig.Succeeded != 1 || succeeded != 1 {
		t.Errorf("original: succeeded %d, %d succeeded run records (%+v), want one", orig.Succeeded, succeeded, orig.Runs)
	}
}

// TestScenario4StuckDocumentsDoNotStarveTheSweep: scenario 4, 50 stuck
// documents (ObjectId _id, held by a dead worker whose lease lapsed, the
// earliest next_expiry) fill every sweep batch. A real task whose worker
// died holding it, with a later next_expiry, must still have its run
// expired and then run and succeed; and the sweep must not spin on the
// stuck documents.
func TestScenario4StuckDocumentsDoNotStarveTheSweep(t *testing.T) {
	const stuck = 50 // sweepBatch
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	opts := mscheduler.Task[int]{PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second}
	src, real := opts, opts
	src.Key, src.RunAt = "src", time.Now().Add(time.Hour) // what the stuck documents were cloned from; not due
	real.Key = "real"
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{src, real}, nil); err != nil {
		t.Fatal(err)
	}

	// Stuck as a clone claimed by a worker that died: running, a holder
	// entry with a lapsed lease, running 1, free 0, next_expiry long past.
	long := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	base := stDocD(t, coll, "src")
	docs := make([]any, stuck)
	for i := range stuck {
		d := stWith(base, "_id", stDrop)
		lapsed := long.Add(time.Duration(i) * time.Millisecond)
		for _, f := range []bson.E{
			{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0}, {Key: "run_at", Value: long},
			{Key: "holders", Value: bson.D{{Key: fmt.Sprintf("dead-%d", i), Value: bson.D{
				{Key: "run", Value: fmt.Sprintf("stuck-run-%d", i)}, {Key: "started", Value: lapsed.Add(-time.Second)}, {Key: "lease_until", Value: lapsed}}}}},
			{Key: "next_expiry", Value: lapsed},
		} {
			d = stWith(d, f.Key, f.Value)
		}
		docs[i] = d
	}
	if _, err := coll.InsertMany(ctxT(t), docs); err != nil {
		t.Fatalf("insert the stuck documents: %v", err)
	}
	// The real task, held by a worker that died, its lease lapsed later
	// than the stuck ones'.
	dead := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	setFields(t, coll, "real", bson.D{{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0},
		{Key: "holders.dead", Value: bson.D{{Key: "run", Value: "dead-run"}, {Key: "started", Value: dead}, {Key: "lease_until", Value: dead.Add(time.Second)}}},
		{Key: "next_expiry", Value: dead.Add(time.Second)}})

	// Count the commands of the consumer's own client, and among them the
	// sweep's queries (a find filtered on next_expiry).
	var commands, sweeps atomic.Int64
	name := coll.Name()
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		commands.Add(1)
		if e.CommandName != "find" {
			return
		}
		if c, _ := e.Command.Lookup("find").StringValueOK(); c == name && e.Command.Lookup("filter", "next_expiry").Type != 0 {
			sweeps.Add(1)
		}
	}}
	wcoll := mschedulertest.CollectionOf(t, mschedulertest.NewClient(t, options.Client().SetMonitor(monitor)))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("live", ev)
	cfg.PollInterval = time.Second // idle, the consumer sends a few commands a second
	startConsumer(t, wcoll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)

	stWait(t, stBound, "the dead worker's run of the real task to be expired, then the task to run and succeed", func() (bool, string) {
		var doc struct {
			Status string      `bson:"status"`
			Runs   []storedRun `bson:"runs"`
		}
		if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: "real"}}).Decode(&doc); err != nil {
			t.Fatalf("read the real task: %v", err)
		}
		expired := false
		for _, r := range doc.Runs {
			expired = expired || r.RunID == "dead-run" && r.Outcome == "expired"
		}
		return expired && doc.Status == "succeeded", fmt.Sprintf("real task status %s, runs %+v; %d sweep queries and %d commands so far; documents still running %d; events %v",
			doc.Status, doc.Runs, sweeps.Load(), commands.Load(), countDocs(t, coll, bson.D{{Key: "status", Value: "running"}}), mschedulertest.Summarize(ev.Snapshot()))
	})

	// The sweep does not spin: with nothing left to do, the consumer sends
	// a few commands a second (a poll, a sweep); a sweep that reads the
	// stuck documents again at once keeps the server busy. Measured over a
	// window, not waited on.
	const window = 2 * time.Second
	c0, s0 := commands.Load(), sweeps.Load()
	<-time.After(window)
	if n, s := commands.Load()-c0, sweeps.Load()-s0; n > 150 {
		t.Errorf("the idle consumer sent %d commands (%d sweep queries) in %s: the sweep spins on the stuck documents", n, s, window)
	} else {
		t.Logf("idle: %d commands (%d sweep queries) in %s", n, s, window)
	}
}

// stUnloggedSetup gives task key a kept run record whose history record
// is unwritten, as a worker that died between the two leaves it.
func stUnloggedSetup(t *testing.T, coll *mongo.Collection, key, runID string, runs any, long time.Time) {
	t.Helper()
	editTask(t, coll, key, bson.D{{Key: "$set", Value: bson.D{{Key: "runs", Value: runs},
		{Key: "unlogged", Value: bson.D{{Key: runID, Value: long.Add(time.Second)}}}, {Key: "updated_at", Value: long}}}})
}

func stRecord(runID string, long time.Time) bson.D {
	return bson.D{{Key: "run_id", Value: runID}, {Key: "worker_id", Value: "died"}, {Key: "started", Value: long},
		{Key: "finished", Value: long.Add(time.Second)}, {Key: "outcome", Value: "succeeded"}, {Key: "attempts", Value: 1}, {Key: "result", Value: 1}}
}

// TestScenario5JunkRunsDoNotStopHistoryOfOthers: scenario 5, one task
// whose runs is not an array (with an unwritten history mark) must not
// keep the maintenance pass from writing the other tasks' unwritten
// history records.
func TestScenario5JunkRunsDoNotStopHistoryOfOthers(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	keys := []string{"h1", "h2", "h3", "h4", "h5"}
	var tasks []mscheduler.Task[int]
	for _, k := range append([]string{"junk"}, keys...) {
		tasks = append(tasks, mscheduler.Task[int]{Key: k, RunAt: time.Now().Add(time.Hour)}) // not due: only maintenance touches them
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	stUnloggedSetup(t, coll, "junk", "junk-run", "junk", long)
	var ids bson.A
	for _, k := range keys {
		id := "lost-" + k
		stUnloggedSetup(t, coll, k, id, bson.A{stRecord(id, long)}, long)
		ids = append(ids, id)
	}

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.MaintenanceInterval = 100 * time.Millisecond
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)

	history := coll.Database().Collection(coll.Name() + ".runs")
	stWait(t, stBound, "the maintenance pass to write the history records of the tasks whose runs are sound", func() (bool, string) {
		n := countDocs(t, history, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		return n == int64(len(ids)), fmt.Sprintf("%d of %d records written; %d error events, the last: %s", n, len(ids), ev.Count(mscheduler.EventError), stLastError(ev))
	})
	for _, k := range keys {
		var rec struct {
			Key     string `bson:"key"`
			Outcome string `bson:"outcome"`
		}
		if err := history.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "lost-" + k}}).Decode(&rec); err != nil || rec.Key != k || rec.Outcome != "succeeded" {
			t.Errorf("history record of %s: %+v (%v), want the task's kept record", k, rec, err)
		}
	}
}

// TestScenario6JunkRunsTaskCanBeDeleted: scenario 6, a task whose runs is
// not an array, with an unwritten history mark and no run going, is
// deleted by Delete, plain and with Force.
func TestScenario6JunkRunsTaskCanBeDeleted(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{
		{Key: "junk-plain", RunAt: time.Now().Add(time.Hour)}, {Key: "junk-force", RunAt: time.Now().Add(time.Hour)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	for key, opts := range map[string]*mscheduler.DeleteOpts{"junk-plain": nil, "junk-force": {Force: true}} {
		stUnloggedSetup(t, coll, key, key+"-run", "junk", long)
		if err := p.Delete(ctxT(t), key, opts); err != nil {
			t.Errorf("Delete(%s, %+v) = %v, want nil", key, opts, err)
		}
		if n := countDocs(t, coll, bson.D{{Key: "_id", Value: key}}); n != 0 {
			t.Errorf("after Delete(%s, %+v) the document is still there: %s", key, opts, stState(stRaw(t, coll, key)))
		}
	}
}

// TestListPagesOverClonesOnce: a copy of a task made by hand is listed
// under its own _id, not its original's key, and paging by key lists every
// document once, copies with an ObjectId _id included.
func TestListPagesOverClonesOnce(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	p := newProducer[map[string]any](t, coll, nil)
	for _, key := range []string{"a", "b", "c"} {
		if _, err := p.Publish(ctx, mscheduler.Task[map[string]any]{Key: key}, nil); err != nil {
			t.Fatal(err)
		}
	}
	orig := stDocD(t, coll, "b")
	if _, err := coll.InsertOne(ctx, stWith(orig, "_id", stDrop)); err != nil { // an ObjectId _id
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, stWith(orig, "_id", "b-copy")); err != nil { // key "b" still
		t.Fatal(err)
	}
	seen := map[string]int{}
	after := ""
	for page := 0; page < 10; page++ {
		infos, err := p.List(ctx, mscheduler.ListOpts{Limit: 2, After: after})
		if err != nil {
			t.Fatalf("page %d after %q: %v", page, after, err)
		}
		if len(infos) == 0 {
			break
		}
		for _, info := range infos {
			seen[info.Task.Key]++
		}
		after = infos[len(infos)-1].Task.Key
	}
	if len(seen) != 5 {
		t.Fatalf("listed %v, want the 5 documents", seen)
	}
	for key, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", key, n)
		}
	}
	if seen["b-copy"] != 1 || seen["b"] != 1 {
		t.Errorf("the copy under _id b-copy is not listed under its own _id: %v", seen)
	}
}

// TestARunEndThatMatchesNothingSetsTheTaskInvalid: a field a run's end is
// filtered on, removed by hand while the run goes on, makes every form of
// the end miss while its fence still holds. The end is not tried for
// ever (it held the run's lease, and the worker's slot, with it): the task
// is set invalid naming the field, and the worker goes on serving others.
func TestARunEndThatMatchesNothingSetsTheTaskInvalid(t *testing.T) {
	for _, c := range []struct {
		removed string
		fail    bool
	}{
		{"max_failed_runs", true}, // a failed run's end reads it
		{"free", false},           // a successful run's end reads it
	} {
		t.Run(c.removed, func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "edited", MaxFailedRuns: 3}, nil); err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
				if task.Key != "edited" {
					return 1, nil
				}
				<-release
				if c.fail {
					return 0, errors.New("failed as the test wants")
				}
				return 1, nil
			}
			ev := mschedulertest.NewEvents()
			startConsumer(t, coll, handler, fastConfig("w1", ev))
			ev.WaitCount(t, mscheduler.EventClaimed, 1)
			if _, err := coll.UpdateByID(ctxT(t), "edited", bson.D{{Key: "$unset", Value: bson.D{{Key: c.removed, Value: ""}}}}); err != nil {
				t.Fatal(err)
			}
			close(release)
			stWait(t, stBound, "the task set invalid on "+c.removed, func() (bool, string) {
				st, state, _ := stRead(t, coll, "edited")
				return st.invalidOn(c.removed), state
			})
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "after"}, nil); err != nil {
				t.Fatal(err)
			}
			stWait(t, stBound, "the next task to succeed", func() (bool, string) {
				st, state, _ := stRead(t, coll, "after")
				return st.Status == "succeeded", state
			})
		})
	}
}
