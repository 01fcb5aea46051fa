package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

type sum struct {
	A int `bson:"a"`
	B int `bson:"b"`
}

func TestConsumerRunsTaskAndRecordsResult(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[sum]{Key: "add", Params: sum{2, 3}}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) {
		if task.Run == nil || task.Run.ID == "" || task.Run.WorkerID != "w1" || task.Run.Attempt != 1 {
			return 0, fmt.Errorf("bad run info: %+v", task.Run)
		}
		return task.Params.A + task.Params.B, nil
	}, fastConfig("w1", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)

	st := readTask(t, coll, "add")
	if st.Status != "succeeded" || st.Succeeded != 1 || st.Running != 0 || st.Free != 0 || len(st.Holders) != 0 || st.NextExpiry != nil {
		t.Fatalf("task after run: %+v", st)
	}
	if len(st.Runs) != 1 {
		t.Fatalf("runs = %+v, want one", st.Runs)
	}
	var result int
	if err := st.Runs[0].Result.Unmarshal(&result); err != nil || result != 5 {
		t.Fatalf("result = %d (%v), want 5", result, err)
	}
	if r := st.Runs[0]; r.Outcome != "succeeded" || r.WorkerID != "w1" || r.Attempts != 1 || r.Finished.Before(r.Started) {
		t.Fatalf("run record = %+v", r)
	}
}

// TestClaimRace: 8 workers with their own connections race for 500 tasks;
// every task runs exactly once.
func TestClaimRace(t *testing.T) {
	const tasks, workers = 500, 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	batch := make([]mscheduler.Task[int], tasks)
	for i := range batch {
		batch[i] = mscheduler.Task[int]{Key: fmt.Sprintf("t%03d", i), Params: i}
	}
	start := time.Now()
	if _, err := p.PublishMany(ctxT(t), batch, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d tasks in %v", tasks, time.Since(start))
	var mu sync.Mutex
	runs := map[int]int{}
	ev := mschedulertest.NewEvents()
	for w := 0; w < workers; w++ {
		wcoll := mschedulertest.CollectionOf(t, mschedulertest.NewClient(t))
		cfg := fastConfig(fmt.Sprintf("w%d", w), ev)
		cfg.Capacity = 4
		// No worker dies here; on the development server every sweep scans
		// the collection, and eight workers sweeping each second would
		// measure the sweeps rather than the claims.
		cfg.SweepInterval = time.Minute
		startConsumer(t, wcoll, func(ctx context.Context, task *mscheduler.Task[int]) (struct{}, error) {
			mu.Lock()
			runs[task.Params]++
			mu.Unlock()
			return struct{}{}, nil
		}, cfg)
	}
	// The development server scans the collection for every claim and run
	// end: about 3 tasks/s here with 500 tasks, so this takes minutes.
	ev.WaitCountWithin(t, 10*time.Minute, mscheduler.EventSucceeded, tasks)
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < tasks; i++ {
		if runs[i] != 1 {
			t.Errorf("task %d ran %d times", i, runs[i])
		}
	}
	if n := countDocs(t, coll, bson.D{{Key: "status", Value: "succeeded"}}); n != tasks {
		t.Fatalf("succeeded tasks = %d, want %d", n, tasks)
	}
	if n := ev.Count(mscheduler.EventClaimed); n != tasks {
		t.Fatalf("claims = %d, want %d", n, tasks)
	}
}

func TestConcurrencyThreeWithFiveWorkers(t *testing.T) {
	for _, distinct := range []bool{false, true} {
		t.Run(fmt.Sprintf("distinct=%v", distinct), func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "c3", Concurrency: 3, DistinctWorkers: distinct}, nil); err != nil {
				t.Fatal(err)
			}
			ev := mschedulertest.NewEvents()
			var mu sync.Mutex
			running, maxRunning := 0, 0
			release := make(chan struct{})
			for w := 0; w < 5; w++ {
				startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
					mu.Lock()
					running++
					maxRunning = max(maxRunning, running)
					mu.Unlock()
					if !distinct {
						<-release // hold the slot, so that the bound is tested
					}
					mu.Lock()
					running--
					mu.Unlock()
					return 0, nil
				}, fastConfig(fmt.Sprintf("w%d", w), ev))
			}
			if !distinct {
				ev.WaitCount(t, mscheduler.EventClaimed, 3)
				close(release)
			}
			ev.WaitCount(t, mscheduler.EventSucceeded, 3)
			st := readTask(t, coll, "c3")
			if st.Status != "succeeded" || st.Succeeded != 3 || len(st.Runs) != 3 {
				t.Fatalf("task = %+v", st)
			}
			workersSeen := map[string]bool{}
			for _, r := range st.Runs {
				workersSeen[r.WorkerID] = true
			}
			if len(workersSeen) != 3 {
				t.Fatalf("runs by %d distinct workers (%v), want 3 (a worker never holds two runs of a task at once)", len(workersSeen), workersSeen)
			}
			if distinct && len(st.DoneBy) != 3 {
				t.Fatalf("done_by = %v, want 3 workers", st.DoneBy)
			}
			if maxRunning > 3 {
				t.Fatalf("%d runs at once, want at most 3", maxRunning)
			}
			if n := ev.Count(mscheduler.EventClaimed); n != 3 {
				t.Fatalf("claims = %d, want exactly 3", n)
			}
		})
	}
}

// TestDistinctWorkersNeverRepeat: with distinct workers, one worker that
// finishes fast cannot take a second slot of the task.
func TestDistinctWorkersNeverRepeat(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "d", Concurrency: 2, DistinctWorkers: true}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("only", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	// A second worker takes the remaining slot; "only" never got it.
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("second", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
	st := readTask(t, coll, "d")
	if st.Status != "succeeded" || st.Runs[0].WorkerID != "only" || st.Runs[1].WorkerID != "second" {
		t.Fatalf("task = %+v", st)
	}
}

func TestWorkerIDsAndGroups(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	tasks := []mscheduler.Task[string]{
		{Key: "for-b", Params: "b", WorkerIDs: []string{"b"}},
		{Key: "for-gpu", Params: "gpu", Group: "gpu"},
		{Key: "for-c-or-b", Params: "b|c", WorkerIDs: []string{"c", "b"}},
		{Key: "anyone", Params: "*"},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	var mu sync.Mutex
	ran := map[string]string{}
	handler := func(ctx context.Context, task *mscheduler.Task[string]) (int, error) {
		mu.Lock()
		ran[task.Key] = task.Run.WorkerID
		mu.Unlock()
		return 0, nil
	}
	cfgA := fastConfig("a", ev) // no groups, not allowed for the targeted tasks
	startConsumer(t, coll, handler, cfgA)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	cfgB := fastConfig("b", ev)
	cfgB.Groups = []string{"gpu"}
	startConsumer(t, coll, handler, cfgB)
	ev.WaitCount(t, mscheduler.EventSucceeded, 4)
	mu.Lock()
	defer mu.Unlock()
	if ran["anyone"] != "a" && ran["anyone"] != "b" {
		t.Errorf("anyone ran on %q", ran["anyone"])
	}
	for _, k := range []string{"for-b", "for-gpu", "for-c-or-b"} {
		if ran[k] != "b" {
			t.Errorf("%s ran on %q, want b", k, ran[k])
		}
	}
}

func TestPriorityOrderThenRunAt(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	base := time.Now().Add(-time.Hour)
	tasks := []mscheduler.Task[int]{
		{Key: "low-early", Priority: 0, RunAt: base},
		{Key: "high-late", Priority: 5, RunAt: base.Add(2 * time.Minute)},
		{Key: "high-early", Priority: 5, RunAt: base.Add(time.Minute)},
		{Key: "mid", Priority: 1, RunAt: base.Add(3 * time.Minute)},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	var mu sync.Mutex
	var order []string
	cfg := fastConfig("solo", ev)
	cfg.Capacity = 1
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		order = append(order, task.Key)
		mu.Unlock()
		return 0, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 4)
	want := "high-early,high-late,mid,low-early"
	if got := strings.Join(order, ","); got != want {
		t.Fatalf("order = %s, want %s", got, want)
	}
}

func TestFutureRunAtIsNotClaimedEarly(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	ev := mschedulertest.NewEvents()
	c := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", ev))
	runAt := time.Now().Add(c.ClockOffset()).Add(1500 * time.Millisecond)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "later", RunAt: runAt}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	var claimedAt time.Time
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventClaimed {
			claimedAt = e.At
		}
	}
	if claimedAt.Before(runAt.Truncate(time.Millisecond)) {
		t.Fatalf("claimed at %v, before run_at %v", claimedAt, runAt)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
}

func TestPanicRetriesThenFailsRunsThenTask(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "boom", MaxRetries: 2, RetryDelay: time.Millisecond, MaxFailedRuns: 2}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	var mu sync.Mutex
	calls := 0
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		panic("kaput")
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventFailed, 2)
	st := readTask(t, coll, "boom")
	if st.Status != "failed" || st.FailedRuns != 2 || len(st.Runs) != 2 {
		t.Fatalf("task = %+v", st)
	}
	for _, r := range st.Runs {
		if r.Outcome != "failed" || r.Attempts != 3 || !strings.Contains(r.Error, "handler panic: kaput") || !strings.Contains(r.Error, "consumer_test.go") {
			t.Fatalf("run = %+v, want a failed run of 3 attempts with the panic and its stack", r)
		}
	}
	if n := ev.Count(mscheduler.EventRetried); n != 4 {
		t.Fatalf("retries = %d, want 4 (2 per run)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 6 {
		t.Fatalf("handler calls = %d, want 6", calls)
	}
	var perr *mscheduler.PanicError
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventRetried && !errors.As(e.Err, &perr) {
			t.Fatalf("retried event error %v is not a *PanicError", e.Err)
		}
	}
}

func TestSkipRetryFailsRunAtOnce(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: 5, MaxFailedRuns: 1}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		return 0, mscheduler.SkipRetry(errors.New("bad input"))
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	st := readTask(t, coll, "k")
	if st.Status != "failed" || st.Runs[0].Attempts != 1 || st.Runs[0].Error != "bad input" {
		t.Fatalf("task = %+v", st)
	}
}

func TestFailedRunLetsAnotherWorkerTry(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	// The failed run delays the task by its backoff (about RetryDelay), so
	// the flaky worker is stopped before it could claim it again.
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: mscheduler.NoRetries, RetryDelay: 2 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	flaky := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		return 0, errors.New("disk full")
	}, fastConfig("flaky", ev))
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	if err := flaky.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	st := readTask(t, coll, "k")
	if !st.RunAt.After(st.Runs[0].Finished) {
		t.Fatalf("run_at %v not moved past the failed run's end %v", st.RunAt, st.Runs[0].Finished)
	}
	if st.Status != "pending" || st.FailedRuns != 1 || st.Free != 1 || st.Runs[0].Error != "disk full" {
		t.Fatalf("after failed run: %+v", st)
	}
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 1, nil }, fastConfig("good", ev))
	ev.WaitFor(t, "a success by good", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventSucceeded && e.WorkerID == "good" {
				return true
			}
		}
		return false
	})
	if st := readTask(t, coll, "k"); st.Status != "succeeded" || st.FailedRuns != 1 {
		t.Fatalf("task = %+v", st)
	}
}

// TestClaimAnnouncesItsRunsBeforeTheirHandlers: the claimed events of one
// claim all come before any of its handlers is called, however slowly the
// consumer reports them (each claimed event takes 100 ms here, as on a
// busy machine where the claim loop waits for a core): a front end that
// hands runs on knows of every run of a claim while it hands the first.
func TestClaimAnnouncesItsRunsBeforeTheirHandlers(t *testing.T) {
	coll := mschedulertest.Collection(t)
	keys := publishLeased(t, coll, 4, "", time.Second, 30*time.Second, 1)
	var mu sync.Mutex
	var order []string             // "claimed <run id>" and "handler <run id>", as they came
	claimOf := map[string]string{} // run id → its claim, told apart by its round trip
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 4
	cfg.OnEvent = func(e mscheduler.Event) {
		if e.Kind == mscheduler.EventClaimed {
			<-time.After(100 * time.Millisecond)
			mu.Lock()
			order = append(order, "claimed "+e.RunID)
			claimOf[e.RunID] = e.Latency.String()
			mu.Unlock()
		}
		ev.Record(e)
	}
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		order = append(order, "handler "+task.Run.ID)
		mu.Unlock()
		return 1, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, len(keys))

	mu.Lock()
	defer mu.Unlock()
	for i, step := range order {
		run, ok := strings.CutPrefix(step, "handler ")
		if !ok {
			continue
		}
		for _, later := range order[i+1:] {
			if other, ok := strings.CutPrefix(later, "claimed "); ok && claimOf[other] == claimOf[run] {
				t.Fatalf("the handler of run %s was called before run %s of its claim was announced: %q", run, other, order)
			}
		}
	}
}

// TestHoldingCountsTheRunsHeld: while a handler runs, the consumer holds
// its slot (Holding) and its run (Running); after Stop it holds none.
// Holding may exceed Running only while a claim is under way, which a
// full consumer never starts.
func TestHoldingCountsTheRunsHeld(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[sum]{Key: "held", Params: sum{1, 1}}, nil); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	// One slot: with more, a claim for the free ones may be under way
	// while the handler runs, and Holding rightly counts its slots too.
	cfg := fastConfig("w1", mschedulertest.NewEvents())
	cfg.Capacity = 1
	c := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) {
		close(started)
		<-release
		return 2, nil
	}, cfg)
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the handler did not start within a minute")
	}
	if c.Running() != 1 || c.Holding() != 1 {
		t.Errorf("with one handler running: Running %d, Holding %d, want 1 and 1", c.Running(), c.Holding())
	}
	close(release)
	if err := c.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if c.Running() != 0 || c.Holding() != 0 {
		t.Errorf("after Stop: Running %d, Holding %d, want 0 and 0", c.Running(), c.Holding())
	}
}
