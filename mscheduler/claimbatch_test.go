package mscheduler_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// claimCommands records batch claims: updates whose statements add a run.
func claimCommands() *updateStatements {
	return &updateStatements{match: func(st bson.Raw) bool { return isOne(st.Lookup("u", "$inc", "running")) }}
}

// batches sums the commands and statements recorded.
func batches(c *updateStatements) (n, statements int) {
	for _, s := range c.snapshot() {
		n, statements = n+1, statements+s
	}
	return n, statements
}

// concurrencyWatch records, while handlers run, the most runs at once of
// each task, of each worker, and of each task by one worker.
type concurrencyWatch struct {
	mu                          sync.Mutex
	task, worker, taskWorker    map[string]int
	maxTask, maxWorker, maxPair map[string]int
}

func newConcurrencyWatch() *concurrencyWatch {
	return &concurrencyWatch{task: map[string]int{}, worker: map[string]int{}, taskWorker: map[string]int{},
		maxTask: map[string]int{}, maxWorker: map[string]int{}, maxPair: map[string]int{}}
}

func (w *concurrencyWatch) enter(key, worker string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pair := key + "/" + worker
	w.task[key]++
	w.worker[worker]++
	w.taskWorker[pair]++
	w.maxTask[key] = max(w.maxTask[key], w.task[key])
	w.maxWorker[worker] = max(w.maxWorker[worker], w.worker[worker])
	w.maxPair[pair] = max(w.maxPair[pair], w.taskWorker[pair])
}

func (w *concurrencyWatch) leave(key, worker string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.task[key]--
	w.worker[worker]--
	w.taskWorker[key+"/"+worker]--
}

// TestBatchClaimsKeepSlotsAndConcurrency drains tasks of concurrency 1 to
// 3 (some wanting distinct workers) with one consumer of 64 slots, and
// with 8 consumers of 8 slots: no task ever has more runs at once than its
// concurrency, no worker more than its slots, no worker two runs of one
// task, and each task ends with as many successes as its concurrency,
// from distinct workers where it asks for them. Batch claims did the work.
func TestBatchClaimsKeepSlotsAndConcurrency(t *testing.T) {
	for _, c := range []struct{ consumers, capacity, tasks int }{{1, 64, 100}, {8, 8, 90}} {
		t.Run(fmt.Sprintf("%dx%d", c.consumers, c.capacity), func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			tasks := make([]mscheduler.Task[int], c.tasks)
			successes := 0
			for i := range tasks {
				tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%03d", i), Concurrency: i%3 + 1, DistinctWorkers: c.consumers > 1 && i%2 == 0}
				successes += tasks[i].Concurrency
			}
			if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
				t.Fatal(err)
			}
			counts := claimCommands()
			client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: counts.started}))
			watch := newConcurrencyWatch()
			ev := mschedulertest.NewEvents()
			for w := range c.consumers {
				cfg := fastConfig(fmt.Sprintf("w%d", w), ev)
				// Wakes come from run ends in this process; polls of 8
				// consumers would only load the server.
				cfg.Capacity, cfg.PollInterval, cfg.SweepInterval = c.capacity, 500*time.Millisecond, 5*time.Second
				startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
					watch.enter(task.Key, task.Run.WorkerID)
					defer watch.leave(task.Key, task.Run.WorkerID)
					// Long enough for runs of one task to overlap.
					select {
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
					}
					return 0, nil
				}, cfg)
			}
			ev.WaitCountWithin(t, 2*time.Minute, mscheduler.EventSucceeded, successes)
			// A claim applied but never run would lapse into an expired run.
			if n := ev.Count(mscheduler.EventExpired); n != 0 {
				t.Errorf("%d runs expired", n)
			}
			for i, task := range tasks {
				if got := watch.maxTask[task.Key]; got > task.Concurrency {
					t.Errorf("%s: %d runs at once, concurrency %d", task.Key, got, task.Concurrency)
				}
				doc := readTask(t, coll, task.Key)
				if doc.Status != string(mscheduler.StatusSucceeded) || doc.Succeeded != task.Concurrency {
					t.Errorf("task %d: status %s with %d successes, want succeeded with %d", i, doc.Status, doc.Succeeded, task.Concurrency)
				}
				if task.DistinctWorkers {
					seen := map[string]bool{}
					for _, r := range doc.Runs {
						if seen[r.WorkerID] {
							t.Errorf("%s wants distinct workers; %s ran it twice", task.Key, r.WorkerID)
						}
						seen[r.WorkerID] = true
					}
				}
			}
			for worker, most := range watch.maxWorker {
				if most > c.capacity {
					t.Errorf("%s ran %d handlers at once, capacity %d", worker, most, c.capacity)
				}
			}
			for pair, most := range watch.maxPair {
				if most > 1 {
					t.Errorf("%s: %d runs of one task by one worker at once", pair, most)
				}
			}
			if n, statements := batches(counts); n == 0 || statements <= n {
				t.Errorf("%d batch claims with %d statements: the work was not claimed in batches", n, statements)
			} else {
				t.Logf("%d batch claims, %.1f statements each; %d successes", n, float64(statements)/float64(n), successes)
			}
		})
	}
}

// TestBatchClaimTakesHigherPriorityFirst: with ten free slots, tasks of
// higher priority (twenty, more than a batch) are claimed before any of
// the twenty others, whatever their run_at.
func TestBatchClaimTakesHigherPriorityFirst(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	var tasks []mscheduler.Task[int]
	early := time.Now().Add(-time.Hour)
	for i := range 20 {
		tasks = append(tasks, mscheduler.Task[int]{Key: fmt.Sprintf("low%02d", i), RunAt: early})
	}
	for i := range 20 {
		tasks = append(tasks, mscheduler.Task[int]{Key: fmt.Sprintf("high%02d", i), Priority: 5})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 10
	release := make(chan struct{})
	startConsumer(t, coll, heldUntil(release), cfg)
	t.Cleanup(func() { close(release) })
	ev.WaitCount(t, mscheduler.EventClaimed, 10)
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventClaimed && e.Key[:4] != "high" {
			t.Errorf("claimed %s while tasks of higher priority waited", e.Key)
		}
	}
}

// waitEntered waits for n handlers to say they entered.
func waitEntered(t *testing.T, entered <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-entered:
		case <-ctxT(t).Done():
			t.Fatal("timed out waiting for the handlers")
		}
	}
}

// heldUntil is a handler that returns when release is sent on or closed,
// or its run is cancelled.
func heldUntil(release <-chan struct{}) mscheduler.Handler[int, int] {
	return func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	}
}

func isOne(v bson.RawValue) bool {
	n, ok := v.AsInt64OK()
	return ok && n == 1
}

// untargeted records the single-document writes to the task collection
// whose filter does not name one _id: on a collection sharded on _id,
// MongoDB before 7.1 refuses such a findAndModify.
type untargeted struct {
	mu   sync.Mutex
	coll string
	seen []string
}

func (u *untargeted) started(_ context.Context, e *event.CommandStartedEvent) {
	var filters []bson.Raw
	switch e.CommandName {
	case "findAndModify":
		if e.Command.Lookup("findAndModify").StringValue() == u.coll {
			filters = append(filters, e.Command.Lookup("query").Document())
		}
	case "update":
		if e.Command.Lookup("update").StringValue() != u.coll {
			return
		}
		updates, _ := e.Command.Lookup("updates").Array().Values()
		for _, st := range updates {
			if multi, _ := st.Document().Lookup("multi").BooleanOK(); !multi {
				filters = append(filters, st.Document().Lookup("q").Document())
			}
		}
	}
	for _, f := range filters {
		if id := f.Lookup("_id"); id.Type != bson.TypeString {
			u.mu.Lock()
			u.seen = append(u.seen, e.CommandName+" "+f.String())
			u.mu.Unlock()
		}
	}
}

// TestTargetedClaimsNameTheirTask: with TargetedClaims, a consumer of one
// slot and one of four drain their tasks with every single-document write
// naming its task's _id.
func TestTargetedClaimsNameTheirTask(t *testing.T) {
	for _, capacity := range []int{1, 4} {
		t.Run(fmt.Sprintf("Capacity=%d", capacity), func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			tasks := make([]mscheduler.Task[int], 12)
			for i := range tasks {
				tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i), Concurrency: i%2 + 1}
			}
			if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
				t.Fatal(err)
			}
			u := &untargeted{coll: coll.Name()}
			client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: u.started}))
			ev := mschedulertest.NewEvents()
			cfg := fastConfig("w", ev)
			cfg.Capacity, cfg.TargetedClaims = capacity, true
			startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
			ev.WaitCount(t, mscheduler.EventSucceeded, 12+6)
			u.mu.Lock()
			defer u.mu.Unlock()
			if len(u.seen) > 0 {
				t.Errorf("%d single-document writes without their task's _id, first: %s", len(u.seen), u.seen[0])
			}
		})
	}
}

// TestLostBatchClaimReplyIsFound: the reply to a batch claim is lost on
// the way back; the read that follows finds the claims all the same, and
// each task runs once.
func TestLostBatchClaimReplyIsFound(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	for i := range 4 {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), MaxFailedRuns: 1, PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var dropped atomic.Bool
	proxy, client := newCmdProxy(t, nil)
	// With TargetedClaims, the first update of the task collection this
	// worker sends is its first claim: nothing has ended yet.
	proxy.dropIf = func(name string, body, _ bson.Raw) bool {
		return name == "update" && body.Lookup("update").StringValue() == coll.Name() && dropped.CompareAndSwap(false, true)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.TargetedClaims = 4, true
	startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 4)
	if !dropped.Load() {
		t.Fatal("no claim reply was dropped")
	}
	for i := range 4 {
		st := readTask(t, coll, fmt.Sprintf("k%d", i))
		if len(st.Runs) != 1 || st.Runs[0].Outcome != "succeeded" || st.FailedRuns != 0 {
			t.Errorf("k%d: %+v, want one run, succeeded", i, st)
		}
	}
	if n := ev.Count(mscheduler.EventClaimed); n != 4 {
		t.Errorf("%d claims, want 4", n)
	}
}

// TestBatchClaimPastAHandEditedCandidate: a claimable task whose priority
// and worker timeout were edited into strings does not stop batch claims:
// the good tasks beside it run, and it is set invalid, naming the field.
func TestBatchClaimPastAHandEditedCandidate(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	var tasks []mscheduler.Task[int]
	for i := range 6 {
		tasks = append(tasks, mscheduler.Task[int]{Key: fmt.Sprintf("good%d", i)})
	}
	tasks = append(tasks, mscheduler.Task[int]{Key: "bad", Priority: 1})
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "bad", bson.D{{Key: "priority", Value: "high"}, {Key: "worker_timeout_ms", Value: "long"}})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.TargetedClaims = 4, true
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 6)
	waitStatus(t, ev, coll, "bad", "invalid")
	doc, err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "bad"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if reason := doc.Lookup("invalid", "reason").String(); !strings.Contains(reason, "priority") && !strings.Contains(reason, "worker_timeout_ms") {
		t.Errorf("bad task set invalid with %s, want the field named", doc.Lookup("invalid"))
	}
}

// TestBatchClaimGathersFreeSlots: with work waiting, a consumer of 8
// slots whose runs end one at a time waits for half its slots to be free
// and claims them in one batch, instead of claiming each slot as it frees;
// a slot that frees alone is claimed once the window has passed.
func TestBatchClaimGathersFreeSlots(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], 40)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i)}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	batchClaims := claimCommands()
	var singleClaims atomic.Int64
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		batchClaims.started(ctx, e)
		if e.CommandName == "findAndModify" && e.Command.Lookup("query", "free").Type != 0 {
			singleClaims.Add(1)
		}
	}}))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	// A window far longer than four run ends take: the claim waits for the
	// slots, not for the window.
	cfg.Capacity, cfg.ClaimBatchWindow = 8, time.Second
	release := make(chan struct{})
	startConsumer(t, dbCollection(client, coll), heldUntil(release), cfg)
	t.Cleanup(func() { close(release) })
	ev.WaitCount(t, mscheduler.EventClaimed, 8)
	singles, before := singleClaims.Load(), len(batchClaims.snapshot())
	for i := range 4 {
		release <- struct{}{}
		ev.WaitCount(t, mscheduler.EventSucceeded, i+1)
	}
	ev.WaitCount(t, mscheduler.EventClaimed, 12)
	if got := singleClaims.Load() - singles; got != 0 {
		t.Errorf("%d slots claimed alone as they freed, want none", got)
	}
	if got := batchClaims.snapshot()[before:]; fmt.Sprint(got) != "[4]" {
		t.Errorf("statements of the claims after four runs ended one by one = %v, want [4]", got)
	}
	// One slot freed and no other: claimed once the window has passed.
	release <- struct{}{}
	ev.WaitCount(t, mscheduler.EventClaimed, 13)
}

// TestBatchClaimBuildsTheTaskAsClaimed: a batch claim of tasks of
// concurrency 1, fenced on their rev, builds each task as claimed from
// the task as read instead of reading it back; what it builds is what the
// server holds after the claim, for a task just published, one whose
// holders, next_expiry and invalid reason are left from earlier, and one
// whose next_expiry is sooner than the claim's, and one claimed at a
// longer lease than its worker timeout. A task of concurrency 2
// is not built (another worker's claim may land between read and write).
func TestBatchClaimBuildsTheTaskAsClaimed(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[map[string]any](t, coll, nil)
	tasks := []mscheduler.Task[map[string]any]{
		{Key: "fresh", Params: map[string]any{"n": 1, "s": "x"}, Tags: []string{"a"}},
		{Key: "left", Params: map[string]any{"n": 2}},
		{Key: "sooner", Params: map[string]any{"n": 3}},
		{Key: "stretched", Params: map[string]any{"n": 4}},
		{Key: "two", Concurrency: 2},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "left", bson.D{{Key: "holders", Value: bson.D{}}, {Key: "next_expiry", Value: time.Now().Add(time.Hour)}, {Key: "invalid", Value: bson.D{{Key: "field", Value: "x"}}}})
	setFields(t, coll, "sooner", bson.D{{Key: "next_expiry", Value: time.Now().Add(-time.Hour)}})
	for _, key := range []string{"fresh", "left", "sooner", "stretched"} {
		var stretch time.Duration // a run at a longer lease: lease_ms, lease_until and next_expiry by it
		if key == "stretched" {
			stretch = 20 * time.Second
		}
		server, local, exact, err := mscheduler.ClaimBothWays(ctxT(t), coll, key, stretch)
		if err != nil || !exact {
			t.Fatalf("%s: exact %v, %v", key, exact, err)
		}
		var s, l bson.M
		if err := bson.Unmarshal(server, &s); err != nil {
			t.Fatal(err)
		}
		if err := bson.Unmarshal(local, &l); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s, l) {
			t.Errorf("%s as claimed:\nserver %v\nbuilt  %v", key, s, l)
		}
		if leaseMS, _ := server.Lookup("holders", "w", "lease_ms").AsInt64OK(); leaseMS != stretch.Milliseconds() {
			t.Errorf("%s: lease_ms %d, want %d", key, leaseMS, stretch.Milliseconds())
		}
	}
	if _, _, exact, err := mscheduler.ClaimBothWays(ctxT(t), coll, "two", 0); err != nil || exact {
		t.Errorf("task of concurrency 2: exact %v, %v; want not built", exact, err)
	}
}

// TestBatchClaimOfSingleRunTasksReadsNothingBack: 16 tasks of concurrency
// 1 claimed by one consumer of 16 slots take two commands a batch (the
// candidates and the update), and each handler gets its task's params and
// the run the task holds.
func TestBatchClaimOfSingleRunTasksReadsNothingBack(t *testing.T) {
	const n = 16
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i), Params: i}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	var readBacks atomic.Int64
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" && e.Command.Lookup("filter", "holders.w.run").Type != 0 {
			readBacks.Add(1)
		}
	}}))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = n
	var mu sync.Mutex
	got := map[string]string{} // key: params and run id as the handler saw them
	release, entered := make(chan struct{}), make(chan struct{}, n)
	startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		got[task.Key] = fmt.Sprintf("k%02d %s", task.Params, task.Run.ID)
		mu.Unlock()
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	}, cfg)
	t.Cleanup(func() { close(release) })
	waitEntered(t, entered, n)
	if r := readBacks.Load(); r != 0 {
		t.Errorf("%d claims read back, want none", r)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		var doc struct {
			Holders map[string]struct {
				Run string `bson:"run"`
			} `bson:"holders"`
		}
		if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		run := doc.Holders["w"].Run
		if want := fmt.Sprintf("%s %s", key, run); got[key] != want {
			t.Errorf("handler of %s saw %q, want %q (params, the run the task holds)", key, got[key], want)
		}
	}
}

// TestBatchClaimSeesAnEditMadeBeforeItsWrite: a task edited after the
// batch read it as a candidate, but before the claim's write, runs as
// edited: its statement, fenced on the rev read, misses, and the task is
// claimed again from what the server holds.
func TestBatchClaimSeesAnEditMadeBeforeItsWrite(t *testing.T) {
	const n = 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i)}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	edited := make(chan string, 1)
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		updates, _ := e.Command.Lookup("updates").Array().Values()
		if len(updates) < 2 || !isOne(updates[0].Document().Lookup("u", "$inc", "running")) {
			return
		}
		once.Do(func() {
			key := updates[0].Document().Lookup("q", "_id").StringValue()
			description := "edited"
			if err := p.Update(context.Background(), key, mscheduler.TaskUpdate{Description: &description}); err != nil {
				t.Errorf("edit %s: %v", key, err)
			}
			edited <- key
		})
	}}))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = n
	var mu sync.Mutex
	seen := map[string]string{}
	release, entered := make(chan struct{}), make(chan struct{}, n)
	startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		seen[task.Key] = task.Description
		mu.Unlock()
		entered <- struct{}{}
		return heldUntil(release)(ctx, task)
	}, cfg)
	t.Cleanup(func() { close(release) })
	waitEntered(t, entered, n)
	key := <-edited
	mu.Lock()
	defer mu.Unlock()
	if seen[key] != "edited" {
		t.Errorf("%s, edited between the batch's read and its write, ran with description %q, want %q", key, seen[key], "edited")
	}
}

// TestClaimsReadBackFindEveryRunMatched: a batch claim's read back first
// asks for running tasks only (cheaper where only equalities are pushed
// down), and reads again without that when it found fewer runs than the
// server said matched: a task whose status another run's end changed
// meanwhile still has its new run found. No statement matched, no read.
func TestClaimsReadBackFindEveryRunMatched(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "a"}, {Key: "b"}, {Key: "c"}}, nil); err != nil {
		t.Fatal(err)
	}
	hold := func(key, status string) {
		setFields(t, coll, key, bson.D{{Key: "status", Value: status}, {Key: "holders", Value: bson.D{{Key: "w", Value: bson.D{{Key: "run", Value: "r-" + key}}}}}})
	}
	hold("a", "running")
	hold("b", "failed") // failed runs exhausted by another run's end
	var finds atomic.Int64
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" {
			finds.Add(1)
		}
	}}))
	mc := dbCollection(client, coll)
	keys, runs := []string{"a", "b", "c"}, []string{"r-a", "r-b", "r-c"}
	both := map[string]string{"a": "r-a", "b": "r-b"}
	for _, tc := range []struct {
		name      string
		bStatus   string
		matched   int64
		want      map[string]string
		wantFinds int64
	}{
		{"a status changed since the claim", "failed", 2, both, 2},
		{"every claim running", "running", 2, both, 1},
		{"matched unknown", "failed", -1, both, 1},
		{"none matched", "running", 0, map[string]string{}, 0},
	} {
		hold("b", tc.bStatus)
		finds.Store(0)
		got, err := mscheduler.ReadClaims(ctxT(t), mc, keys, runs, tc.matched)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) || finds.Load() != tc.wantFinds {
			t.Errorf("%s: found %v with %d finds, want %v with %d", tc.name, got, finds.Load(), tc.want, tc.wantFinds)
		}
	}
}
