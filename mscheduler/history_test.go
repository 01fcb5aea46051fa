package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func historyOf(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".runs")
}

// allRuns reads every page of Producer.Runs for f.
func allRuns[P any](t *testing.T, p *mscheduler.Producer[P], f mscheduler.RunFilter) []mscheduler.RunInfo {
	t.Helper()
	var out []mscheduler.RunInfo
	for {
		page, err := p.Runs(ctxT(t), f)
		if err != nil {
			t.Fatalf("Runs(%+v): %v", f, err)
		}
		out = append(out, page.Runs...)
		if page.Next == "" {
			return out
		}
		f.After = page.Next
	}
}

// waitHistory waits until the history holds n records of key.
func waitHistory(t *testing.T, coll *mongo.Collection, key string, n int64) {
	t.Helper()
	waitUntil(t, waitTimeout, fmt.Sprintf("%d history records of %s", n, key), func() bool {
		return countDocs(t, historyOf(coll), bson.D{{Key: "key", Value: key}}) >= n
	})
}

// waitUntil polls cond, for a state that no event announces (a history
// record written in the background, a TTL monitor's delete).
//
// It looks again 20 ms after a look, or five times as long as the look
// took if that is longer: a condition that queries the development server
// (one command at a time) every 20 ms while the machine is busy is much
// of the load that keeps the workers it waits for from their work.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		start := time.Now()
		if cond() {
			return
		}
		select {
		case <-time.After(max(20*time.Millisecond, 5*time.Since(start))):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestHistoryRecordsEveryOutcome: runs that succeed, fail, time out, are
// cancelled, revoked, released or expire each get one history record with
// their outcome, which Runs finds by key, outcome and worker, newest
// first, a page at a time.
func TestHistoryRecordsEveryOutcome(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	tasks := []mscheduler.Task[string]{
		{Key: "ok", Params: "ok"},
		{Key: "fails", Params: "fail", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
		{Key: "slow", Params: "slow", Timeout: 50 * time.Millisecond, MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
		{Key: "cancelled", Params: "block", PingInterval: 100 * time.Millisecond},
		{Key: "revoked", Params: "block", WorkerIDs: []string{"w"}, PingInterval: 100 * time.Millisecond},
		{Key: "released", Params: "block"},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 10
	w := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		switch task.Params {
		case "fail":
			return "", errors.New("it failed")
		case "slow", "block":
			<-ctx.Done()
			return "", context.Cause(ctx)
		}
		return "done", nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 6)
	if err := p.Cancel(ctxT(t), "cancelled"); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(ctxT(t), "revoked", mscheduler.TaskUpdate{WorkerIDs: &[]string{"someone-else"}}); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventRevoked, 1)
	ev.WaitCount(t, mscheduler.EventCancelled, 1)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil { // releases "released"
		t.Fatal(err)
	}
	// A dead worker's run: expired by a sweep.
	dead := time.Now().Add(-time.Minute)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[string]{Key: "expired", Params: "ok"}, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "expired", bson.D{{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0},
		{Key: "holders.dead", Value: bson.D{{Key: "run", Value: "dead-run"}, {Key: "started", Value: dead}, {Key: "lease_until", Value: dead.Add(time.Second)}}},
		{Key: "next_expiry", Value: dead.Add(time.Second)}})
	ev2 := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[string]) (string, error) { return "later", nil }, fastConfig("sweeper", ev2))
	waitHistory(t, coll, "expired", 2)
	for _, k := range []string{"ok", "fails", "slow", "cancelled", "revoked", "released"} {
		waitHistory(t, coll, k, 1)
	}

	want := map[string]mscheduler.Outcome{
		"ok": mscheduler.OutcomeSucceeded, "fails": mscheduler.OutcomeFailed, "slow": mscheduler.OutcomeFailed,
		"cancelled": mscheduler.OutcomeCancelled, "revoked": mscheduler.OutcomeRevoked, "released": mscheduler.OutcomeReleased,
	}
	for key, outcome := range want {
		runs := allRuns(t, p, mscheduler.RunFilter{Key: key})
		if len(runs) < 1 || runs[len(runs)-1].Outcome != outcome || runs[len(runs)-1].Key != key || runs[len(runs)-1].WorkerID != "w" {
			t.Errorf("%s: history %+v, want its first run %s by w", key, runs, outcome)
		}
	}
	expired := allRuns(t, p, mscheduler.RunFilter{Key: "expired"})
	if len(expired) != 2 || expired[1].Outcome != mscheduler.OutcomeExpired || expired[1].RunID != "dead-run" || expired[0].Outcome != mscheduler.OutcomeSucceeded {
		t.Errorf("expired: history %+v, want the dead run expired, then a success, newest first", expired)
	}
	// Newest first, paged, without a record twice.
	all := allRuns(t, p, mscheduler.RunFilter{Limit: 2})
	ids := map[string]bool{}
	for i, r := range all {
		if ids[r.RunID] {
			t.Fatalf("run %s listed twice", r.RunID)
		}
		ids[r.RunID] = true
		if i > 0 && r.Finished.After(all[i-1].Finished) {
			t.Fatalf("runs not newest first: %v after %v", r.Finished, all[i-1].Finished)
		}
	}
	if n := countDocs(t, historyOf(coll), bson.D{}); len(all) != int(n) || n < 8 {
		t.Fatalf("paged through %d runs, history holds %d", len(all), n)
	}
	failed := allRuns(t, p, mscheduler.RunFilter{Outcome: mscheduler.OutcomeFailed})
	if len(failed) != 2 || !slices.ContainsFunc(failed, func(r mscheduler.RunInfo) bool { return r.Key == "slow" }) {
		t.Errorf("failed runs: %+v, want fails and slow", failed)
	}
	// The second worker ran the expired task, and the released one.
	if byWorker := allRuns(t, p, mscheduler.RunFilter{WorkerID: "sweeper"}); len(byWorker) != 2 ||
		!slices.ContainsFunc(byWorker, func(r mscheduler.RunInfo) bool { return r.Key == "expired" }) {
		t.Errorf("runs of sweeper: %+v", byWorker)
	}
	if _, err := p.Runs(ctxT(t), mscheduler.RunFilter{After: "not-a-cursor"}); !errors.Is(err, mscheduler.ErrInvalid) {
		t.Errorf("a bad cursor: %v, want ErrInvalid", err)
	}
	waitUntil(t, waitTimeout, "every history mark removed", func() bool {
		return countDocs(t, coll, bson.D{{Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}) == 0
	})
}

// TestUnwrittenHistoryIsWrittenByMaintenance: a worker that died between a
// run's end and its history record leaves the run's id in the task's
// unlogged list; the maintenance pass writes the record from the task's
// runs, once, and clears the list.
func TestUnwrittenHistoryIsWrittenByMaintenance(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", RunAt: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	record := bson.D{{Key: "run_id", Value: "lost-run"}, {Key: "worker_id", Value: "died"}, {Key: "started", Value: long},
		{Key: "finished", Value: long.Add(time.Second)}, {Key: "outcome", Value: "succeeded"}, {Key: "attempts", Value: 1}, {Key: "result", Value: 42}}
	setFields(t, coll, "k", bson.D{{Key: "runs", Value: bson.A{record}}, {Key: "unlogged", Value: bson.D{{Key: "lost-run", Value: long}, {Key: "forgotten-run", Value: long}}}, {Key: "updated_at", Value: long}})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.MaintenanceInterval = 100 * time.Millisecond
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	waitHistory(t, coll, "k", 2)
	waitUntil(t, waitTimeout, "the unlogged marks to be removed", func() bool {
		return countDocs(t, coll, bson.D{{Key: "_id", Value: "k"}, {Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}) == 0
	})
	runs := allRuns(t, p, mscheduler.RunFilter{Key: "k"})
	if len(runs) != 2 {
		t.Fatalf("history %+v, want the two runs", runs)
	}
	for _, r := range runs {
		switch r.RunID {
		case "lost-run":
			var v int
			if r.Outcome != mscheduler.OutcomeSucceeded || r.WorkerID != "died" || r.Result.Unmarshal(&v) != nil || v != 42 {
				t.Errorf("lost run's record %+v, want the task's record", r)
			}
		case "forgotten-run": // no longer kept on the task: what is known
			if r.Outcome != "unknown" || r.Error == "" {
				t.Errorf("forgotten run's record %+v", r)
			}
		}
	}
}

// TestRetentionDeletesFinishedTasksAndRuns: finished tasks and their run
// records are deleted once their retention ends: by the maintenance pass
// on a server without TTL indexes (the development server), by the
// server's TTL monitor (within a minute) on MongoDB. Pending tasks stay.
func TestRetentionDeletesFinishedTasksAndRuns(t *testing.T) {
	coll := mschedulertest.Collection(t)
	retention := mscheduler.Retention{Succeeded: 200 * time.Millisecond, Failed: 200 * time.Millisecond}
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Retention: retention})
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "done"}, {Key: "waiting", RunAt: time.Now().Add(time.Hour)}}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Retention, cfg.MaintenanceInterval = retention, 100*time.Millisecond
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	waitUntil(t, 2*waitTimeout, "the finished task and its run to be deleted", func() bool {
		return countDocs(t, coll, bson.D{{Key: "_id", Value: "done"}}) == 0 && countDocs(t, historyOf(coll), bson.D{{Key: "key", Value: "done"}}) == 0
	})
	if n := countDocs(t, coll, bson.D{{Key: "_id", Value: "waiting"}}); n != 1 {
		t.Fatal("a pending task was deleted")
	}
}

// TestOneMaintenanceLeader: of four workers, one holds the maintenance
// lease.
func TestOneMaintenanceLeader(t *testing.T) {
	coll := mschedulertest.Collection(t)
	newProducer[int](t, coll, nil)
	ev := mschedulertest.NewEvents()
	var cs []*mscheduler.Consumer[int, int]
	for i := range 4 {
		cfg := fastConfig(fmt.Sprintf("w%d", i), ev)
		cfg.MaintenanceInterval = 100 * time.Millisecond
		cs = append(cs, startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg))
	}
	var lease struct {
		Holder string `bson:"holder"`
	}
	waitUntil(t, waitTimeout, "a maintenance lease", func() bool {
		return coll.Database().Collection(coll.Name()+".meta").FindOne(ctxT(t), bson.D{{Key: "_id", Value: "maintenance"}}).Decode(&lease) == nil
	})
	// Several rounds of tries later, still one leader, and it is the holder.
	waitSweeps(t, coll, 1)
	leaders := 0
	for _, c := range cs {
		if c.MaintenanceLeader() {
			leaders++
			if c.WorkerID() != lease.Holder {
				t.Errorf("%s says it leads, the lease says %s", c.WorkerID(), lease.Holder)
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders, want 1", leaders)
	}
}
