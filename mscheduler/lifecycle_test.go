package mscheduler_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestLeaseLostCancelsHandlerAndDropsResult: when another worker takes the
// run (here, by a hand edit of the holder's run id), the next ping matches
// nothing, the handler's context is cancelled with ErrLeaseLost, and its late
// result is not written.
func TestLeaseLostCancelsHandlerAndDropsResult(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 5 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (string, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "late result", nil
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	setFields(t, coll, "k", bson.D{{Key: "holders.w.run", Value: "taken-over"}})
	ev.WaitCount(t, mscheduler.EventLeaseLost, 1)
	if cause := <-causes; !errors.Is(cause, mscheduler.ErrLeaseLost) {
		t.Fatalf("handler context cause = %v, want ErrLeaseLost", cause)
	}
	st := readTask(t, coll, "k")
	if len(st.Runs) != 0 || st.Status != "running" || st.Succeeded != 0 {
		t.Fatalf("task after lost lease = %+v, want nothing written", st)
	}
	if n := ev.Count(mscheduler.EventSucceeded); n != 0 {
		t.Fatalf("succeeded events = %d, want 0", n)
	}
}

// TestStopLetsHandlersFinish: within Stop's deadline a handler finishes
// and its run is recorded as succeeded.
func TestStopLetsHandlersFinish(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	proceed := make(chan struct{})
	c := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		<-proceed
		return 7, nil
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctxT(t)) }()
	close(proceed)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st := readTask(t, coll, "k"); st.Status != "succeeded" {
		t.Fatalf("task = %+v", st)
	}
	if err := c.Stop(ctxT(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Start(ctxT(t)); !errors.Is(err, mscheduler.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

// TestShutdownReleasesRunsAtOnce: past Stop's deadline handlers are
// cancelled and their runs released, so another worker claims them while
// the old lease is still valid.
func TestShutdownReleasesRunsAtOnce(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", WorkerTimeout: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	first := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		return 0, context.Cause(ctx)
	}, fastConfig("leaving", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventReleased, 1)
	st := readTask(t, coll, "k")
	if st.Status != "pending" || st.Free != 1 || st.Running != 0 || len(st.Runs) != 1 || st.Runs[0].Outcome != "released" || st.FailedRuns != 0 {
		t.Fatalf("after release: %+v", st)
	}
	if !strings.Contains(st.Runs[0].Error, "shutting down") {
		t.Fatalf("released run error = %q", st.Runs[0].Error)
	}
	released := st.Runs[0]
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 1, nil }, fastConfig("staying", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st = readTask(t, coll, "k")
	if st.Status != "succeeded" || st.Runs[1].WorkerID != "staying" {
		t.Fatalf("after takeover: %+v", st)
	}
	// The old run's lease was a minute long; the new run started well within it.
	var leaseUntil time.Time
	for _, r := range st.Runs {
		if r.RunID == released.RunID {
			leaseUntil = r.Finished
		}
	}
	if !st.Runs[1].Started.Before(leaseUntil.Add(time.Minute)) {
		t.Fatalf("new run started at %v, not before the released lease would have lapsed", st.Runs[1].Started)
	}
}

// TestShutdownAbandonsHandlerThatIgnoresContext: a handler that ignores its
// cancelled context is abandoned after ReleaseTimeout; its run is released
// and its late result is not written.
func TestShutdownAbandonsHandlerThatIgnoresContext(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	unblock := make(chan struct{})
	returned := make(chan struct{})
	cfg := fastConfig("w", ev)
	cfg.ReleaseTimeout = 100 * time.Millisecond
	c := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer close(returned)
		<-unblock // ignores ctx
		return 1, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	st := readTask(t, coll, "k")
	if st.Status != "pending" || len(st.Runs) != 1 || st.Runs[0].Outcome != "released" || !strings.Contains(st.Runs[0].Error, "abandoned") {
		t.Fatalf("after abandon: %+v", st)
	}
	close(unblock)
	<-returned
	if st := readTask(t, coll, "k"); len(st.Runs) != 1 || st.Succeeded != 0 {
		t.Fatalf("late result was written: %+v", st)
	}
}

// TestSkewedClocks: workers whose clocks are 30 s ahead and behind neither
// stall, nor claim a task early, nor take over each other's live runs.
func TestSkewedClocks(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	ev := mschedulertest.NewEvents()
	var mu sync.Mutex
	runs := map[string]int{}
	startedAt := map[string]time.Time{} // by the test's own clock, which the server shares
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		runs[task.Key]++
		startedAt[task.Key] = time.Now()
		mu.Unlock()
		if task.Params == 1 {
			// Longer than the lease: only pings in server time keep it.
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 0, nil
	}
	start := func(skew time.Duration) {
		cfg := fastConfig(fmt.Sprintf("skew%+d", int(skew.Seconds())), ev)
		cfg.Clock = func() time.Time { return time.Now().Add(skew) }
		cfg.SweepInterval = 100 * time.Millisecond
		c := startConsumer(t, mschedulertest.CollectionOf(t, mschedulertest.NewClient(t)), handler, cfg)
		if off := c.ClockOffset(); (off + skew).Abs() > time.Second {
			t.Fatalf("clock offset %v does not cancel a skew of %v", off, skew)
		}
	}
	// The slow clock alone must not stall: it claims tasks due now.
	start(-30 * time.Second)
	var long []mscheduler.Task[int]
	for i := 0; i < 6; i++ {
		long = append(long, mscheduler.Task[int]{Key: fmt.Sprintf("long%d", i), Params: 1, PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Second})
	}
	if _, err := p.PublishMany(ctxT(t), long, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventClaimed, len(long))
	// The fast clock must neither preempt the slow worker's live runs nor
	// start a task before its time.
	start(30 * time.Second)
	future := mscheduler.Task[int]{Key: "future", RunAt: time.Now().Add(time.Second)}
	tasks := []mscheduler.Task[int]{future}
	for i := 0; i < 10; i++ {
		tasks = append(tasks, mscheduler.Task[int]{Key: fmt.Sprintf("short%d", i)})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, len(long)+len(tasks))
	mu.Lock()
	defer mu.Unlock()
	for _, task := range append(long, tasks...) {
		if runs[task.Key] != 1 {
			t.Errorf("%s ran %d times", task.Key, runs[task.Key])
		}
	}
	if n := ev.Count(mscheduler.EventExpired); n != 0 {
		t.Errorf("%d runs expired; skewed clocks broke leases", n)
	}
	if got := startedAt["future"]; got.Before(future.RunAt.Add(-50 * time.Millisecond)) {
		t.Errorf("future task started at %v, before its run_at %v", got, future.RunAt)
	}
}

// crashWorkerEnv makes the test binary a worker process that announces each
// run it starts and then hangs, for the crash test to SIGKILL it.
const crashWorkerEnv = "MSCHEDULER_TEST_CRASH_WORKER"

func runCrashWorker() {
	uri, collName := os.Getenv("MONGODB_URI"), os.Getenv(crashWorkerEnv)
	client := mschedulertest.ConnectOrExit(uri)
	coll := client.Database(mschedulertest.Database).Collection(collName)
	c, err := mscheduler.NewConsumer(coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		fmt.Printf("started %s %s %d\n", task.Key, task.Run.ID, task.Run.PlannedAt.UnixMilli())
		select {} // hang until killed
	}, &mscheduler.ConsumerConfig{WorkerID: "doomed", PollInterval: 50 * time.Millisecond, Logger: quietLog})
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	select {}
}

// crashStart is what a crash worker printed when its handler started.
type crashStart struct {
	runID   string
	planned time.Time
}

// startCrashWorker starts a worker process (this test binary again) whose
// handler hangs, and waits until it has started a run of task "k".
func startCrashWorker(t *testing.T, coll *mongo.Collection) (*exec.Cmd, crashStart) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashWorkerEnv+"="+coll.Name(), "MONGODB_URI="+mschedulertest.URI())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) != 4 || fields[0] != "started" || fields[1] != "k" {
		t.Fatalf("worker said %q (%v), want a started line", line, err)
	}
	ms, _ := strconv.ParseInt(fields[3], 10, 64)
	return cmd, crashStart{runID: fields[2], planned: time.UnixMilli(ms).UTC()}
}

// TestCrashedWorkerIsPreempted: a worker process is SIGKILLed mid-run; its
// lease lapses, another worker records the run as expired, takes the slot
// and finishes the task.
func TestCrashedWorkerIsPreempted(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 700 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	cmd, started := startCrashWorker(t, coll)
	deadRun := started.runID
	// Let it ping at least once, so that the lease is the task's own.
	waitForLeaseRenewal(t, coll, "k", "doomed")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("rescuer", ev)
	cfg.SweepInterval = 100 * time.Millisecond
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	if st.Status != "succeeded" || len(st.Runs) != 2 || st.FailedRuns != 1 {
		t.Fatalf("task = %+v", st)
	}
	dead, done := st.Runs[0], st.Runs[1]
	if dead.RunID != deadRun || dead.WorkerID != "doomed" || dead.Outcome != "expired" || !strings.Contains(dead.Error, "lease expired") {
		t.Fatalf("dead run = %+v", dead)
	}
	if done.WorkerID != "rescuer" || done.Outcome != "succeeded" {
		t.Fatalf("finishing run = %+v", done)
	}
	if n := ev.Count(mscheduler.EventExpired); n != 1 {
		t.Fatalf("expired events = %d, want 1", n)
	}
}

// waitForLeaseRenewal waits until a holder's lease was moved by a ping: its
// lease_until changes from what it was when first seen, and is shorter than
// the 30 s a claim takes before the worker knows the task's timeout.
func waitForLeaseRenewal(t *testing.T, coll *mongo.Collection, key, worker string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	var first time.Time
	for {
		var doc struct {
			Holders map[string]struct {
				Started    time.Time `bson:"started"`
				LeaseUntil time.Time `bson:"lease_until"`
			} `bson:"holders"`
		}
		if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if h, ok := doc.Holders[worker]; ok {
			if first.IsZero() {
				first = h.LeaseUntil
			} else if !h.LeaseUntil.Equal(first) && h.LeaseUntil.Sub(h.Started) < 20*time.Second {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("lease of %s on %s never renewed", worker, key)
		}
	}
}

// TestPingsFailingUntilLeaseLapsesStopHandler: a worker cut off from the
// server cannot renew its lease; when the lease lapses it cancels the handler
// itself (another worker may take the run from then on).
func TestPingsFailingUntilLeaseLapsesStopHandler(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	client := mschedulertest.NewClient(t)
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, mschedulertest.CollectionOf(t, client), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, ctx.Err()
	}, fastConfig("cut-off", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	waitForLeaseRenewal(t, coll, "k", "cut-off")
	if err := client.Disconnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, mscheduler.ErrLeaseLost) || !strings.Contains(cause.Error(), "lapsed") {
			t.Fatalf("cause = %v, want ErrLeaseLost after the lease lapsed", cause)
		}
	case <-time.After(waitTimeout):
		t.Fatal("handler was not cancelled after its lease lapsed")
	}
	if n := ev.Count(mscheduler.EventError); n == 0 {
		t.Fatal("no error event for the failed pings")
	}
}

func TestDiscoveryChangeStream(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Discovery = mscheduler.DiscoveryChangeStream
	cfg.ChangeStreamPollInterval = time.Hour // only the stream can wake the worker
	cfg.PollInterval = time.Hour
	c, err := mscheduler.NewConsumer(coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !mschedulertest.HasChangeStreams(ctxT(t), coll) {
		// The server has none (a standalone MongoDB, the development
		// server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set): a consumer
		// that requires one must refuse to start.
		if err := c.Start(ctxT(t)); err == nil || !strings.Contains(err.Error(), "change stream") {
			t.Fatalf("Start = %v, want an error about the change stream", err)
		}
		t.Skip("this server has no change streams; the stream path needs a replica set or the development server's emulated streams (MSCHEDULER_DEV_NO_CHANGE_STREAMS unset)")
	}
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "pushed"}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
}
