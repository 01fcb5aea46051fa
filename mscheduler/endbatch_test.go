package mscheduler_test

import (
	"context"
	"fmt"
	"strings"
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

// updateStatements records the update commands whose first statement
// matches, with their number of statements.
type updateStatements struct {
	match      func(statement bson.Raw) bool
	mu         sync.Mutex
	statements []int
}

func (c *updateStatements) started(_ context.Context, e *event.CommandStartedEvent) {
	if e.CommandName != "update" {
		return
	}
	updates, _ := e.Command.Lookup("updates").Array().Values()
	if len(updates) == 0 || !c.match(updates[0].Document()) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements = append(c.statements, len(updates))
}

func (c *updateStatements) snapshot() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.statements...)
}

// endCommands records the commands that end runs: their statements push a
// run record.
func endCommands() *updateStatements {
	return &updateStatements{match: func(st bson.Raw) bool { return st.Lookup("u", "$push", "runs").Type != 0 }}
}

// heldForEnds publishes n tasks and starts a consumer that holds them all
// until release is closed; its run ends wait up to a second for each
// other, so that they go in one batch. It returns the collection as the
// test sees it, the events and the run-end commands counted.
func heldForEnds(t *testing.T, n int, endBatchMax int) (coll *mongo.Collection, ev *mschedulertest.Events, counts *updateStatements, release chan struct{}) {
	t.Helper()
	coll = mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		// Long pings: the run ends, not a ping, are to meet what the test changes.
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), PingInterval: 20 * time.Second, WorkerTimeout: time.Minute}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	counts = endCommands()
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: counts.started}))
	ev = mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.EndBatchMax, cfg.EndBatchWindow = n, endBatchMax, time.Second
	release = make(chan struct{})
	startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-release:
			return 7, nil
		}
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, n)
	return coll, ev, counts, release
}

// TestBatchedRunEndsAreOneCommand: eight runs that end together are
// written in one command of eight statements (two at most: under the
// parallel tests' load one handler may return after the batch left), and
// each is recorded as if written alone; with EndBatchMax 1, each is its
// own command.
func TestBatchedRunEndsAreOneCommand(t *testing.T) {
	const n = 8
	for _, c := range []struct {
		batchMax    int
		maxCommands int
	}{{mscheduler.EndBatchMaxDefault, 2}, {1, n}} {
		t.Run(fmt.Sprintf("EndBatchMax=%d", c.batchMax), func(t *testing.T) {
			coll, ev, counts, release := heldForEnds(t, n, c.batchMax)
			close(release)
			ev.WaitCount(t, mscheduler.EventSucceeded, n)
			got, total := counts.snapshot(), 0
			for _, s := range got {
				total += s
				if s > c.batchMax {
					t.Errorf("a run-end command of %d statements, over EndBatchMax %d", s, c.batchMax)
				}
			}
			if total != n || len(got) > c.maxCommands || c.batchMax == 1 && len(got) != n {
				t.Errorf("statements per run-end command = %v; want the %d ends in at most %d commands", got, n, c.maxCommands)
			}
			for i := range n {
				doc := mschedulertest.Doc(t, coll, fmt.Sprintf("k%d", i))
				runs, _ := doc["runs"].(bson.A)
				if doc["status"] != "succeeded" || len(runs) != 1 || doc["running"] != int32(0) {
					t.Errorf("k%d after its run ended: status %v, running %v, %d records", i, doc["status"], doc["running"], len(runs))
				}
			}
		})
	}
}

// TestBatchedRunEndOfPreemptedRunWritesNothing: a run whose slot another
// worker took meanwhile writes nothing in its batch (its statement is
// fenced on it) and is reported lost; the rest of the batch lands, and a
// run whose task moved to another case since it was read (its concurrency
// raised) is written again alone.
func TestBatchedRunEndOfPreemptedRunWritesNothing(t *testing.T) {
	const n = 8
	coll, ev, counts, release := heldForEnds(t, n, mscheduler.EndBatchMaxDefault)
	ctx := ctxT(t)
	// k0: another worker took the slot over (as after a lapse and a sweep).
	other := bson.D{{Key: "run", Value: "other-run"}, {Key: "started", Value: time.Now()}, {Key: "lease_until", Value: time.Now().Add(time.Hour)}}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k0"}}, bson.D{
		{Key: "$unset", Value: bson.D{{Key: "holders.w", Value: ""}}},
		{Key: "$set", Value: bson.D{{Key: "holders.x", Value: other}}},
	}); err != nil {
		t.Fatal(err)
	}
	// k1: one more slot, so its run's end is no longer the last success
	// (paused, so that the slot is not claimed again at once).
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k1"}}, bson.D{
		{Key: "$inc", Value: bson.D{{Key: "concurrency", Value: 1}, {Key: "free", Value: 1}}},
		{Key: "$set", Value: bson.D{{Key: "paused", Value: true}}},
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	ev.WaitCount(t, mscheduler.EventSucceeded, n-1)
	ev.WaitCount(t, mscheduler.EventLeaseLost, 1)
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventLeaseLost && e.Key != "k0" {
			t.Errorf("lease lost reported for %s, want only k0", e.Key)
		}
	}
	k0, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "k0"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if k0.Lookup("runs").Type != 0 || k0.Lookup("running").AsInt64() != 1 || k0.Lookup("status").StringValue() != "running" ||
		k0.Lookup("holders", "x", "run").StringValue() != "other-run" || k0.Lookup("unlogged").Type != 0 {
		t.Errorf("the preempted run wrote to its task: %v", k0)
	}
	k1 := mschedulertest.Doc(t, coll, "k1")
	if runs, _ := k1["runs"].(bson.A); len(runs) != 1 || k1["status"] != "pending" || k1["free"] != int32(1) {
		t.Errorf("k1 after its run ended with a slot left: status %v, free %v, runs %v", k1["status"], k1["free"], k1["runs"])
	}
	for i := 2; i < n; i++ {
		if doc := mschedulertest.Doc(t, coll, fmt.Sprintf("k%d", i)); doc["status"] != "succeeded" {
			t.Errorf("k%d: status %v, want succeeded", i, doc["status"])
		}
	}
	// One batch of all eight, then k1 alone; k0 was not written again.
	if got := counts.snapshot(); fmt.Sprint(got) != fmt.Sprint([]int{n, 1}) {
		t.Errorf("statements per run-end command = %v, want [%d 1]", got, n)
	}
}

// TestRunEndAppliedWithItsReplyLostIsRecorded: the server applies a run
// end (alone, or a batch of four) but its reply is lost; the write tried
// again finds the run gone, and then its own history mark on the task, so
// the runs are reported succeeded, not lost.
func TestRunEndAppliedWithItsReplyLostIsRecorded(t *testing.T) {
	for _, c := range []struct{ tasks, endBatchMax int }{{1, 1}, {4, mscheduler.EndBatchMaxDefault}} {
		t.Run(fmt.Sprintf("tasks=%d,EndBatchMax=%d", c.tasks, c.endBatchMax), func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			for i := range c.tasks {
				if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), PingInterval: 20 * time.Second, WorkerTimeout: time.Minute}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var dropped, ending atomic.Bool
			proxy, client := newCmdProxy(t, nil)
			// Once the handlers are released, the first update of the task
			// collection is a run end (pings are 20 s apart).
			proxy.dropIf = func(name string, body, _ bson.Raw) bool {
				return ending.Load() && name == "update" && body.Lookup("update").StringValue() == coll.Name() && dropped.CompareAndSwap(false, true)
			}
			ev := mschedulertest.NewEvents()
			cfg := fastConfig("w", ev)
			cfg.Capacity, cfg.EndBatchMax, cfg.EndBatchWindow = c.tasks, c.endBatchMax, time.Second
			release := make(chan struct{})
			startConsumer(t, dbCollection(client, coll), func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
				<-release
				return 1, nil
			}, cfg)
			ev.WaitCount(t, mscheduler.EventClaimed, c.tasks)
			ending.Store(true)
			close(release)
			ev.WaitCount(t, mscheduler.EventSucceeded, c.tasks)
			if !dropped.Load() {
				t.Fatal("no run end reply was dropped")
			}
			if n := ev.Count(mscheduler.EventLeaseLost); n != 0 {
				t.Errorf("%d runs reported lost", n)
			}
			for i := range c.tasks {
				if st := readTask(t, coll, fmt.Sprintf("k%d", i)); st.Status != "succeeded" || len(st.Runs) != 1 {
					t.Errorf("k%d: status %s with %d records, want succeeded with 1", i, st.Status, len(st.Runs))
				}
			}
		})
	}
}

// markPulls records the commands that only remove history marks.
func markPulls() *updateStatements {
	return &updateStatements{match: func(st bson.Raw) bool {
		u, _ := st.Lookup("u").DocumentOK()
		elems, _ := u.Elements()
		if len(elems) != 1 || elems[0].Key() != "$unset" {
			return false
		}
		fields, _ := elems[0].Value().Document().Elements()
		return len(fields) > 0 && strings.HasPrefix(fields[0].Key(), "unlogged.")
	}}
}

// publishCountingEnds publishes tasks and returns a client whose
// run-end and mark-removal commands are counted.
func publishCountingEnds(t *testing.T, p *mscheduler.Producer[int], tasks []mscheduler.Task[int]) (ends, pulls *updateStatements, client *mongo.Client) {
	t.Helper()
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ends, pulls = endCommands(), markPulls()
	client = mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) { ends.started(ctx, e); pulls.started(ctx, e) },
	}))
	return ends, pulls, client
}

// TestHistoryMarksRideWithRunEnds: while runs are going, the statements
// that remove the marks of runs whose history records are written go with
// the next batch of run ends instead of a command of their own; once no
// run is going, they go alone.
func TestHistoryMarksRideWithRunEnds(t *testing.T) {
	const n = 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), Params: i, PingInterval: 20 * time.Second, WorkerTimeout: time.Minute}
	}
	ends, pulls, client := publishCountingEnds(t, p, tasks)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.EndBatchWindow = n, 200*time.Millisecond
	first, second := make(chan struct{}), make(chan struct{})
	c := startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Params < n/2 {
			return holdUntil(first)(ctx, task)
		}
		return holdUntil(second)(ctx, task)
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, n)

	close(first)
	ev.WaitCount(t, mscheduler.EventSucceeded, n/2)
	waitUntil(t, waitTimeout, "the first runs' mark removals to wait for the next run ends", func() bool {
		return mscheduler.CarriedPulls(c) == n/2
	})
	close(second)
	ev.WaitCount(t, mscheduler.EventSucceeded, n)
	waitUntil(t, waitTimeout, "every mark removed", func() bool {
		return countDocs(t, coll, bson.D{{Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}) == 0
	})
	if got, want := ends.snapshot(), []int{n / 2, n/2 + n/2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements per run-end command = %v, want %v (the second with the first runs' mark removals)", got, want)
	}
	if got, want := pulls.snapshot(), []int{n / 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements per mark-removal command = %v, want %v (only the second runs', alone once no run was going)", got, want)
	}
	if got := countDocs(t, historyOf(coll), bson.D{}); got != n {
		t.Errorf("%d history records, want %d", got, n)
	}
}

// TestAMarkRemovalRidesWithARunEndAlone: a consumer ends one run at a
// time; the removal of the first run's history mark goes with the second
// run's end, written alone, one command for both, and only the last
// run's, once no run is going, goes alone.
func TestAMarkRemovalRidesWithARunEndAlone(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := []mscheduler.Task[int]{
		{Key: "first", Params: 0, Priority: 1, PingInterval: 20 * time.Second, WorkerTimeout: time.Minute},
		{Key: "second", Params: 1, PingInterval: 20 * time.Second, WorkerTimeout: time.Minute},
	}
	ends, pulls, client := publishCountingEnds(t, p, tasks)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 1
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	c := startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		return holdUntil(release[task.Params])(ctx, task)
	}, cfg)

	close(release[0])
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	waitUntil(t, waitTimeout, "the first run's mark removal to wait for a run end", func() bool {
		return mscheduler.CarriedPulls(c) == 1
	})
	close(release[1])
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
	waitUntil(t, waitTimeout, "every mark removed", func() bool {
		return countDocs(t, coll, bson.D{{Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}) == 0
	})
	if got, want := ends.snapshot(), []int{1, 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements per run-end command = %v, want %v (the second run's end with the first run's mark removal)", got, want)
	}
	if got, want := pulls.snapshot(), []int{1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements per mark-removal command = %v, want %v (the second run's alone)", got, want)
	}
}

// TestCommandsOfPullsAreBounded: history marks are removed in commands of
// at most 64 statements (a batch of run ends takes carried removals only
// up to its bound: internal/runend's TestRidersFillABatchToItsBound): FerretDB holds a pool connection per statement of
// an update until the command ends, and a command of more statements than
// its pool (100 on SQLite) wedged the development server.
func TestCommandsOfPullsAreBounded(t *testing.T) {
	pulls := &updateStatements{match: func(st bson.Raw) bool { return st.Lookup("u", "$unset").Type != 0 }}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: pulls.started}))
	coll := dbCollection(client, mschedulertest.Collection(t))
	keys := make([]string, 150)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	if err := mscheduler.SendPullsFor(ctxT(t), coll, keys); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(pulls.snapshot()); got != "[64 64 22]" {
		t.Errorf("150 removals sent in commands of %s statements, want [64 64 22]", got)
	}
}
