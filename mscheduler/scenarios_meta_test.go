package mscheduler_test

// Regression tests for scenarios 7-11 of the issue about the collection's
// metadata, retention and the check for unclaimable documents, and for the
// problems R1-R3 found by reading. Each sets up the state through the public
// API and hand edits of the collections (as a person would in mongosh), and
// waits with a bounded deadline, so that a failing test fails within about
// a minute.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
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

// scnMetaWait bounds every wait of these tests: what they wait for takes a
// few maintenance or check intervals (100 ms) once the bug is fixed.
const scnMetaWait = 45 * time.Second

// scnMetaConfig is fastConfig with the maintenance pass and the check every
// 100 ms.
func scnMetaConfig(workerID string, ev *mschedulertest.Events) *mscheduler.ConsumerConfig {
	cfg := fastConfig(workerID, ev)
	cfg.MaintenanceInterval = 100 * time.Millisecond
	cfg.CheckInterval = 100 * time.Millisecond
	return cfg
}

func scnMetaOK(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }

// scnMetaTask is what these tests read of a task document.
type scnMetaTask struct {
	Status  bson.RawValue `bson:"status"`
	Invalid *struct {
		Reason string `bson:"reason"`
		Field  string `bson:"field"`
		Found  string `bson:"found"`
	} `bson:"invalid"`
	ExpireAt *time.Time `bson:"expire_at"`
	Runs     []struct {
		RunID   string `bson:"run_id"`
		Outcome string `bson:"outcome"`
	} `bson:"runs"`
}

func (m scnMetaTask) status() string {
	if s, ok := m.Status.StringValueOK(); ok {
		return s
	}
	return m.Status.String()
}

func (m scnMetaTask) String() string {
	if m.Invalid != nil {
		return fmt.Sprintf("status %s, invalid {field: %q, reason: %q, found: %q}", m.status(), m.Invalid.Field, m.Invalid.Reason, m.Invalid.Found)
	}
	return "status " + m.status()
}

// scnMetaRead reads a task by _id; found is false when it is gone.
func scnMetaRead(t *testing.T, coll *mongo.Collection, key string) (scnMetaTask, bool) {
	t.Helper()
	var m scnMetaTask
	err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&m)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return m, false
	case err != nil:
		t.Fatalf("read task %q: %v", key, err)
	}
	return m, true
}

// scnMetaPoll polls cond every 20 ms until it holds or timeout passes, and
// reports whether it held.
func scnMetaPoll(timeout time.Duration, cond func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			return cond()
		}
	}
	return true
}

// scnMetaWaitInvalid waits until the task is set invalid naming field, and
// fails with what the task is otherwise.
func scnMetaWaitInvalid(t *testing.T, coll *mongo.Collection, key, field string) {
	t.Helper()
	var last scnMetaTask
	var found bool
	scnMetaPoll(scnMetaWait, func() bool {
		last, found = scnMetaRead(t, coll, key)
		return !found || last.status() == string(mscheduler.StatusInvalid)
	})
	switch {
	case !found:
		t.Fatalf("task %q was deleted while waiting for it to be set invalid naming %s", key, field)
	case last.status() != string(mscheduler.StatusInvalid):
		t.Fatalf("task %q still has %s after %s, want status invalid naming field %s", key, last, scnMetaWait, field)
	case last.Invalid == nil || last.Invalid.Field != field:
		t.Fatalf("task %q: %s, want invalid.field %q", key, last, field)
	}
}

// scnMetaWaitLeader waits until the consumer says it holds the maintenance
// lease, and fails showing the lease document otherwise.
func scnMetaWaitLeader(t *testing.T, coll *mongo.Collection, c *mscheduler.Consumer[int, int]) {
	t.Helper()
	if scnMetaPoll(scnMetaWait, c.MaintenanceLeader) {
		return
	}
	var lease bson.M
	_ = metaOf(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: "maintenance"}}).Decode(&lease)
	t.Fatalf("consumer %s never became maintenance leader within %s (the only consumer of the collection); lease document: %v",
		c.WorkerID(), scnMetaWait, lease)
}

// scnMetaPublish publishes tasks and fails the test on an error.
func scnMetaPublish(t *testing.T, p *mscheduler.Producer[int], tasks ...mscheduler.Task[int]) {
	t.Helper()
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// scnMetaWaitSucceeded waits until n runs of key succeeded.
func scnMetaWaitSucceeded(t *testing.T, ev *mschedulertest.Events, key string, n int) {
	t.Helper()
	ev.WaitForWithin(t, scnMetaWait, fmt.Sprintf("%d successful runs of %s", n, key), func(evs []mscheduler.Event) bool {
		got := 0
		for _, e := range evs {
			if e.Kind == mscheduler.EventSucceeded && e.Key == key {
				got++
			}
		}
		return got >= n
	})
}

// TestScenario7MaintenanceLeaseHandEdited: scenario 7, a maintenance lease
// document whose lease_until is not a date, is missing, or whose content is
// junk must not keep every consumer from ever leading maintenance (and so
// from running the check).
func TestScenario7MaintenanceLeaseHandEdited(t *testing.T) {
	cases := []struct {
		name  string
		lease bson.D // the content of {_id: "maintenance"}, besides _id
	}{
		{"LeaseUntilString", bson.D{{Key: "holder", Value: "gone-worker"}, {Key: "lease_until", Value: "2020-01-01T00:00:00Z"}}},
		{"LeaseUntilMissing", bson.D{{Key: "holder", Value: "gone-worker"}}},
		{"Junk", bson.D{{Key: "junk", Value: 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			scnMetaPublish(t, p, mscheduler.Task[int]{Key: "hand-done"})
			setFields(t, coll, "hand-done", bson.D{{Key: "status", Value: "done"}})
			_, err := metaOf(coll).ReplaceOne(ctxT(t), bson.D{{Key: "_id", Value: "maintenance"}},
				append(bson.D{{Key: "_id", Value: "maintenance"}}, tc.lease...), options.Replace().SetUpsert(true))
			if err != nil {
				t.Fatalf("edit the maintenance lease: %v", err)
			}
			c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
			scnMetaWaitLeader(t, coll, c)
			// Proof that the check runs on the leader.
			scnMetaWaitInvalid(t, coll, "hand-done", "status")
		})
	}
}

// TestScenario8SchemaVersionString: scenario 8, {_id: "schema", version:
// "2"} (a string) must not stop a consumer from starting, a producer from
// publishing or EnsureIndexes; the version is a number again afterwards.
func TestScenario8SchemaVersionString(t *testing.T) {
	setup := func(t *testing.T) *mongo.Collection {
		coll := mschedulertest.Collection(t)
		if _, err := metaOf(coll).InsertOne(ctxT(t), bson.D{{Key: "_id", Value: "schema"}, {Key: "version", Value: fmt.Sprint(mscheduler.SchemaVersion)}}); err != nil {
			t.Fatal(err)
		}
		return coll
	}
	wantNumericVersion := func(t *testing.T, coll *mongo.Collection) {
		t.Helper()
		var m bson.Raw
		if err := metaOf(coll).FindOne(ctxT(t), bson.D{{Key: "_id", Value: "schema"}}).Decode(&m); err != nil {
			t.Fatalf("read the schema metadata: %v", err)
		}
		v, ok := m.Lookup("version").AsInt64OK()
		if !ok || v != mscheduler.SchemaVersion {
			t.Fatalf("schema metadata version is %s afterwards, want the number %d", m.Lookup("version"), mscheduler.SchemaVersion)
		}
	}
	t.Run("ConsumerStart", func(t *testing.T) {
		coll := setup(t)
		ev := mschedulertest.NewEvents()
		c, err := mscheduler.NewConsumer(coll, scnMetaOK, scnMetaConfig("w", ev))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatalf("Start with schema version \"2\" (a string): %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
		p, err := mscheduler.NewProducer[int](coll, nil)
		if err != nil {
			t.Fatal(err)
		}
		scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"})
		scnMetaWaitSucceeded(t, ev, "k", 1)
		wantNumericVersion(t, coll)
	})
	t.Run("Publish", func(t *testing.T) {
		coll := setup(t)
		p, err := mscheduler.NewProducer[int](coll, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
			t.Fatalf("Publish with schema version \"2\" (a string): %v", err)
		}
		wantNumericVersion(t, coll)
	})
	t.Run("EnsureIndexes", func(t *testing.T) {
		coll := setup(t)
		if err := mscheduler.EnsureIndexes(ctxT(t), coll); err != nil {
			t.Fatalf("EnsureIndexes with schema version \"2\" (a string): %v", err)
		}
		wantNumericVersion(t, coll)
	})
}

// TestScenario9aResetByHandIsNotDeletedByRetention: scenario 9(a), a
// succeeded task set back to pending by hand keeps its expire_at; retention
// must not delete it: it runs again and succeeds.
func TestScenario9aResetByHandIsNotDeletedByRetention(t *testing.T) {
	coll := mschedulertest.Collection(t)
	retention := mscheduler.Retention{Succeeded: 8 * time.Second, Failed: time.Hour}
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Retention: retention})
	var againRuns atomic.Int32
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Key == "again" && againRuns.Add(1) == 2 {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 1, nil
	}
	ev := mschedulertest.NewEvents()
	cfg := scnMetaConfig("w", ev)
	cfg.Retention = retention
	startConsumer(t, coll, handler, cfg)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the consumer stops

	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "again"})
	scnMetaWaitSucceeded(t, ev, "again", 1)
	if st, _ := scnMetaRead(t, coll, "again"); st.ExpireAt == nil {
		t.Fatalf("the succeeded task has no expire_at (%s): the test needs it", st)
	}
	// Run it again, as the library says: "set free to concurrency and
	// succeeded and failed_runs to 0", status back to pending.
	setFields(t, coll, "again", bson.D{{Key: "status", Value: "pending"}, {Key: "free", Value: 1}, {Key: "succeeded", Value: 0}, {Key: "failed_runs", Value: 0}})
	select {
	case <-entered:
	case <-time.After(scnMetaWait):
		st, found := scnMetaRead(t, coll, "again")
		t.Fatalf("the task set back to pending never ran again (found %v: %s)", found, st)
	}
	// A task that succeeds now expires after the reset task's old
	// expire_at: once retention deleted it, a pass past that expire_at ran.
	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "decoy"})
	scnMetaWaitSucceeded(t, ev, "decoy", 1)
	if !scnMetaPoll(scnMetaWait, func() bool { return countDocs(t, coll, bson.D{{Key: "_id", Value: "decoy"}}) == 0 }) {
		t.Fatalf("retention did not delete the succeeded decoy task within %s", scnMetaWait)
	}
	if _, found := scnMetaRead(t, coll, "again"); !found {
		t.Fatal("the task set back to pending by hand (running again) was deleted by retention, by the expire_at of its earlier success")
	}
	releaseOnce.Do(func() { close(release) })
	scnMetaWaitSucceeded(t, ev, "again", 2)
	st, found := scnMetaRead(t, coll, "again")
	if !found {
		t.Fatal("the task was deleted right after running again")
	}
	succeeded := 0
	for _, r := range st.Runs {
		if r.Outcome == string(mscheduler.OutcomeSucceeded) {
			succeeded++
		}
	}
	if st.status() != string(mscheduler.StatusSucceeded) || succeeded != 2 {
		t.Fatalf("after running again: %s with %d succeeded runs, want succeeded with 2", st, succeeded)
	}
}

// TestScenario9bInvalidTaskIsNotDeletedByRetention: scenario 9(b), a
// finished task set invalid after a hand edit waits for a person:
// retention never deletes it.
func TestScenario9bInvalidTaskIsNotDeletedByRetention(t *testing.T) {
	coll := mschedulertest.Collection(t)
	retention := mscheduler.Retention{Succeeded: 8 * time.Second, Failed: time.Hour}
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Retention: retention})
	ev := mschedulertest.NewEvents()
	cfg := scnMetaConfig("w", ev)
	cfg.Retention = retention
	startConsumer(t, coll, scnMetaOK, cfg)

	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "edited"})
	scnMetaWaitSucceeded(t, ev, "edited", 1)
	setFields(t, coll, "edited", bson.D{{Key: "status", Value: "done"}})
	scnMetaWaitInvalid(t, coll, "edited", "status")
	// A task that succeeds now expires after the edited task's expire_at.
	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "decoy"})
	scnMetaWaitSucceeded(t, ev, "decoy", 1)
	if !scnMetaPoll(scnMetaWait, func() bool { return countDocs(t, coll, bson.D{{Key: "_id", Value: "decoy"}}) == 0 }) {
		t.Fatalf("retention did not delete the succeeded decoy task within %s", scnMetaWait)
	}
	st, found := scnMetaRead(t, coll, "edited")
	if !found {
		t.Fatal("the task set invalid (waiting for a person) was deleted by retention")
	}
	if st.status() != string(mscheduler.StatusInvalid) {
		t.Fatalf("the task set invalid is now %s, want still invalid", st)
	}
}

// TestScenario10RunningWithNoRunGoing: scenario 10, a task that says it is
// running with no run going is set invalid by the check, naming the field:
// (a) status "running" set by hand on a succeeded task, (b) running: 99
// with no holder and no free slot on a pending task.
func TestScenario10RunningWithNoRunGoing(t *testing.T) {
	t.Run("StatusRunningOnSucceeded", func(t *testing.T) {
		coll := mschedulertest.Collection(t)
		p := newProducer[int](t, coll, nil)
		ev := mschedulertest.NewEvents()
		c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", ev))
		scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"}, mscheduler.Task[int]{Key: "control"})
		scnMetaWaitSucceeded(t, ev, "k", 1)
		scnMetaWaitSucceeded(t, ev, "control", 1)
		scnMetaWaitLeader(t, coll, c)
		setFields(t, coll, "k", bson.D{{Key: "status", Value: "running"}, {Key: "holders", Value: bson.D{}}})
		// The control proves the check runs: an unknown status is caught today.
		setFields(t, coll, "control", bson.D{{Key: "status", Value: "queued"}})
		scnMetaWaitInvalid(t, coll, "control", "status")
		scnMetaWaitInvalid(t, coll, "k", "status")
	})
	t.Run("RunningCounterWithNoHolder", func(t *testing.T) {
		coll := mschedulertest.Collection(t)
		p := newProducer[int](t, coll, nil)
		scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"}, mscheduler.Task[int]{Key: "control"})
		setFields(t, coll, "k", bson.D{{Key: "running", Value: 99}, {Key: "holders", Value: bson.D{}}, {Key: "free", Value: 0}})
		setFields(t, coll, "control", bson.D{{Key: "status", Value: "queued"}})
		c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
		scnMetaWaitLeader(t, coll, c)
		scnMetaWaitInvalid(t, coll, "control", "status")
		scnMetaWaitInvalid(t, coll, "k", "running")
	})
}

// TestScenario11GroupOfTheWrongType: scenario 11, a group that is not a
// string ([{x: 1}]) makes a task unclaimable: the check sets it invalid,
// naming group.
func TestScenario11GroupOfTheWrongType(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"}, mscheduler.Task[int]{Key: "control"})
	setFields(t, coll, "k", bson.D{{Key: "group", Value: bson.A{bson.D{{Key: "x", Value: 1}}}}})
	setFields(t, coll, "control", bson.D{{Key: "status", Value: "queued"}})
	c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
	scnMetaWaitLeader(t, coll, c)
	scnMetaWaitInvalid(t, coll, "control", "status")
	scnMetaWaitInvalid(t, coll, "k", "group")
}

// TestScenarioR1OrphanedMarkOfABusyTask: R1, a history mark orphaned by a
// dead worker (an unlogged entry older than 10 s whose record the task
// keeps) gets its history record written even though the task's
// updated_at keeps moving.
func TestScenarioR1OrphanedMarkOfABusyTask(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "busy", RunAt: time.Now().Add(time.Hour)})
	long := time.Now().Add(-time.Minute)
	record := bson.D{{Key: "run_id", Value: "orphan-run"}, {Key: "worker_id", Value: "dead"}, {Key: "started", Value: long.Add(-time.Second)},
		{Key: "lease_until", Value: long.Add(30 * time.Second)}, {Key: "finished", Value: long}, {Key: "outcome", Value: "succeeded"}, {Key: "attempts", Value: 1}}
	setFields(t, coll, "busy", bson.D{{Key: "runs", Value: bson.A{record}}, {Key: "unlogged", Value: bson.D{{Key: "orphan-run", Value: long}}}})

	// The task stays busy: edited every 200 ms, as a recurring task's run
	// ends or a person's edits move its updated_at.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			desc := fmt.Sprintf("edit %d", i)
			if err := p.Update(ctx, "busy", mscheduler.TaskUpdate{Description: &desc}); err != nil && ctx.Err() == nil {
				t.Errorf("update: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
	scnMetaWaitLeader(t, coll, c)
	written := scnMetaPoll(scnMetaWait, func() bool {
		return countDocs(t, historyOf(coll), bson.D{{Key: "_id", Value: "orphan-run"}}) == 1
	})
	if !written {
		var m bson.M
		_ = coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: "busy"}}, options.FindOne().SetProjection(bson.D{{Key: "unlogged", Value: 1}, {Key: "updated_at", Value: 1}})).Decode(&m)
		t.Fatalf("the orphaned history mark of a task whose updated_at keeps moving was not written within %s (task: %v)", scnMetaWait, m)
	}
	var h struct {
		Outcome  string `bson:"outcome"`
		WorkerID string `bson:"worker_id"`
	}
	if err := historyOf(coll).FindOne(ctxT(t), bson.D{{Key: "_id", Value: "orphan-run"}}).Decode(&h); err != nil || h.Outcome != "succeeded" || h.WorkerID != "dead" {
		t.Fatalf("history record %+v (%v), want the task's record: succeeded by dead", h, err)
	}
}

// TestScenarioR2RealRecordWinsOverUnknown: R2, when maintenance wrote an
// "unknown" history record for a run (its mark with no record kept on the
// task) and the run's real record comes after, the history shows the real
// outcome.
func TestScenarioR2RealRecordWinsOverUnknown(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	runIDs := make(chan string, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		runIDs <- task.Run.ID
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return 7, nil
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, handler, scnMetaConfig("w", ev))
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k", PingInterval: 20 * time.Second, WorkerTimeout: time.Minute})
	var runID string
	select {
	case runID = <-runIDs:
	case <-time.After(scnMetaWait):
		t.Fatal("the task never ran")
	}
	// The run's id marked unlogged long ago, its record not kept on the
	// task (as when RunsKept pushed it out while its worker was slow to
	// write the history): the maintenance pass writes an "unknown" record.
	long := time.Now().Add(-time.Minute)
	setFields(t, coll, "k", bson.D{{Key: "unlogged." + runID, Value: long}, {Key: "updated_at", Value: long}})
	var rec struct {
		Outcome string `bson:"outcome"`
	}
	readRecord := func() bool {
		return historyOf(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: runID}}).Decode(&rec) == nil
	}
	if !scnMetaPoll(scnMetaWait, readRecord) || rec.Outcome != "unknown" {
		t.Fatalf("setup: maintenance did not write an unknown record for run %s within %s (record: %+v)", runID, scnMetaWait, rec)
	}
	// The real record comes now.
	releaseOnce.Do(func() { close(release) })
	scnMetaWaitSucceeded(t, ev, "k", 1)
	if !scnMetaPoll(scnMetaWait, func() bool {
		return countDocs(t, coll, bson.D{{Key: "_id", Value: "k"}, {Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}) == 0
	}) {
		t.Fatalf("the run's history mark was never removed after its end")
	}
	if !readRecord() || rec.Outcome != string(mscheduler.OutcomeSucceeded) {
		t.Fatalf("history record of run %s has outcome %q after its real (succeeded) record was written, want succeeded", runID, rec.Outcome)
	}
}

// TestScenarioR3HugeHeartbeatIsNotAliveForever: R3, a worker record whose
// heartbeat_ms was edited to 1e18 (and not seen for 10 minutes) is listed
// stale, or with a problem, not alive for ever.
func TestScenarioR3HugeHeartbeatIsNotAliveForever(t *testing.T) {
	db := scnMetaOwnDatabase(t)
	ctx := ctxT(t)
	for _, id := range []string{"huge", "normal"} {
		w := mscheduler.WorkerInfo{ID: id, Host: "box", PID: 42, Version: mscheduler.Version, Collections: []string{"tasks"}, Capacity: 4,
			StartedAt: time.Now().Add(-time.Hour), HeartbeatMS: 10_000}
		if err := mscheduler.Heartbeat(ctx, db, w); err != nil {
			t.Fatal(err)
		}
	}
	now, err := mscheduler.ServerTime(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	workersColl := db.Collection(mscheduler.WorkersCollection)
	lastSeen := now.Add(-10 * time.Minute)
	for id, hb := range map[string]int64{"huge": 1e18, "normal": 10_000} {
		if _, err := workersColl.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "heartbeat_ms", Value: hb}, {Key: "last_seen", Value: lastSeen}}}}); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := mscheduler.ListWorkers(ctx, db)
	if err != nil {
		t.Fatalf("ListWorkers: %v", err)
	}
	byID := map[string]mscheduler.WorkerInfo{}
	for _, w := range ws {
		byID[w.ID] = w
	}
	if w := byID["normal"]; !w.Stale {
		t.Fatalf("control: a worker not seen for 10 minutes with a 10 s heartbeat is not stale: %+v", w)
	}
	if w := byID["huge"]; !w.Stale && w.Problem == "" {
		t.Fatalf("a worker not seen for 10 minutes with heartbeat_ms 1e18 is listed alive, with no problem (Stale %v, Problem %q)", w.Stale, w.Problem)
	}
}

// scnMetaOwnDatabase is a database of the test's own, dropped at its end:
// the workers collection is per database.
func scnMetaOwnDatabase(t *testing.T) *mongo.Database {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := mschedulertest.Client().Database("mscheduler_test_r3_" + hex.EncodeToString(b[:]))
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	return db
}

// TestWorkerIndexesAreCreatedOnce: the registry's index is created at the
// first start; at the next, its listing finds it and nothing is created
// (a worker restarted every few seconds sent createIndexes each time).
func TestWorkerIndexesAreCreatedOnce(t *testing.T) {
	var mu sync.Mutex
	creates := 0
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "createIndexes" {
			mu.Lock()
			creates++
			mu.Unlock()
		}
	}}
	db := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor)).Database(scnMetaOwnDatabase(t).Name())
	ctx := ctxT(t)
	if err := mscheduler.EnsureWorkerIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := creates
	mu.Unlock()
	if first == 0 {
		t.Fatal("the first start created no index")
	}
	if err := mscheduler.EnsureWorkerIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if creates != first {
		t.Errorf("the second start sent %d createIndexes, want none", creates-first)
	}
}
