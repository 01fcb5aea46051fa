package mscheduler_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Tests that a lease holds while its worker is alive: a slow run end, a
// slow shutdown, wall-clock steps, an unrenewable ping-settings edit, and a
// ping that races with other runs of its task must never let another
// worker take the run (a second handler of a concurrency-1 task).

// runCounter counts handler calls per key, and the most going at once.
type runCounter struct {
	mu      sync.Mutex
	calls   map[string]int
	going   map[string]int
	maxOver map[string]int
}

func newRunCounter() *runCounter {
	return &runCounter{calls: map[string]int{}, going: map[string]int{}, maxOver: map[string]int{}}
}

func (c *runCounter) begin(key string) func() {
	c.mu.Lock()
	c.calls[key]++
	c.going[key]++
	c.maxOver[key] = max(c.maxOver[key], c.going[key])
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.going[key]--
		c.mu.Unlock()
	}
}

func (c *runCounter) counts(key string) (calls, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key], c.maxOver[key]
}

// holdUntil is a handler that returns 1 once release is closed, or the
// cause of its context's end.
func holdUntil(release <-chan struct{}) mscheduler.Handler[int, int] {
	return func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
}

// dbCollection is coll as seen through another client (no drop at the end:
// the test's own collection is dropped once).
func dbCollection(client *mongo.Client, coll *mongo.Collection) *mongo.Collection {
	return client.Database(coll.Database().Name()).Collection(coll.Name())
}

// TestSlowRunEndKeepsLease: the write that ends a run takes three times the
// lease (the server is slow to answer it). The pinger renews the lease
// until the write is acknowledged, so the watching worker's sweeps never
// expire it: the handler runs once, and the run is recorded succeeded.
func TestSlowRunEndKeepsLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	_, slow := newCmdProxy(t, func(name string, body bson.Raw) bool {
		if target, _ := body.Lookup(name).StringValueOK(); name == "update" && target == coll.Name() && !isClaim(name, body) { // the run end
			time.Sleep(1800 * time.Millisecond)
		}
		return false
	})
	ev := mschedulertest.NewEvents()
	counter := newRunCounter()
	renewed := make(chan struct{})
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer counter.begin(task.Key)()
		<-renewed // the lease is the task's own, renewed by pings
		return 1, nil
	}
	startConsumer(t, dbCollection(slow, coll), handler, fastConfig("slow", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	waitForLeaseRenewal(t, coll, "k", "slow")
	close(renewed)
	watch := fastConfig("watching", ev)
	watch.SweepInterval = 50 * time.Millisecond
	startConsumer(t, coll, handler, watch)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	if calls, _ := counter.counts("k"); calls != 1 || st.Status != "succeeded" || len(st.Runs) != 1 || st.FailedRuns != 0 {
		t.Fatalf("handler ran %d times; task %+v: want one run, succeeded", calls, st)
	}
	if n := ev.Count(mscheduler.EventExpired) + ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Fatalf("%d expired or lost leases while the run end was being written", n)
	}
}

// TestSlowShutdownKeepsLease: on Stop a handler takes three times its lease
// to return after its context is cancelled. Its lease is kept until its
// release is written: another worker never expires it, the run counts as
// released (not failed), and that worker then runs the task.
func TestSlowShutdownKeepsLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond, MaxFailedRuns: 1}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	leaving := startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		time.Sleep(1800 * time.Millisecond) // cleaning up, slowly
		return 0, context.Cause(ctx)
	}, fastConfig("leaving", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	waitForLeaseRenewal(t, coll, "k", "leaving")
	watch := fastConfig("staying", ev)
	watch.SweepInterval = 50 * time.Millisecond
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 2, nil }, watch)
	stopCtx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := leaving.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	if st.Status != "succeeded" || len(st.Runs) != 2 || st.Runs[0].Outcome != "released" || st.Runs[1].WorkerID != "staying" || st.FailedRuns != 0 {
		t.Fatalf("task %+v: want the run released on shutdown, then run by the staying worker", st)
	}
	if n := ev.Count(mscheduler.EventExpired); n != 0 {
		t.Fatalf("%d runs expired during a slow shutdown", n)
	}
}

// TestStopWaitsForRunEndsInFlight: Stop returns only once a run end that
// was being written when its wait ran out is written, so that a worker
// process disconnecting after Stop loses no run end.
func TestStopWaitsForRunEndsInFlight(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	ending := make(chan struct{}, 1)
	_, slow := newCmdProxy(t, func(name string, body bson.Raw) bool {
		if target, _ := body.Lookup(name).StringValueOK(); name == "update" && target == coll.Name() && !isClaim(name, body) { // the run end
			select {
			case ending <- struct{}{}:
			default:
			}
			time.Sleep(time.Second)
		}
		return false
	})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.ReleaseTimeout = 50 * time.Millisecond
	c := startConsumer(t, dbCollection(slow, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	waitSignal(t, ending, "no run end sent")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if st := readTask(t, coll, "k"); st.Status != "succeeded" || len(st.Runs) != 1 {
		t.Fatalf("after Stop returned: %+v, want the run end written", st)
	}
}

// steppedClock is a wall clock that a test steps, while the monotonic
// clock goes on undisturbed, as after an NTP correction.
type steppedClock struct{ step atomic.Int64 }

func (c *steppedClock) now() time.Time      { return time.Now().Add(time.Duration(c.step.Load())) }
func (c *steppedClock) set(d time.Duration) { c.step.Store(int64(d)) }

// TestWallClockStepsMoveNoLease: a worker's wall clock steps 5 s forward,
// then 5 s back, between two syncs of its server clock. Forward, it does
// not expire another worker's live run nor start a task seconds early;
// back, it does not start a due task late.
func TestWallClockStepsMoveNoLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "held", PingInterval: 200 * time.Millisecond, WorkerTimeout: 2 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	counter := newRunCounter()
	release := make(chan struct{})
	defer close(release)
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer counter.begin(task.Key)()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	}, fastConfig("holder", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)

	clock := &steppedClock{}
	starts := make(chan time.Time, 10)
	cfg := fastConfig("stepped", ev)
	cfg.Clock, cfg.SweepInterval = clock.now, 50*time.Millisecond
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer counter.begin(task.Key)()
		starts <- time.Now()
		return 0, nil
	}, cfg)
	clock.set(5 * time.Second)
	// Forward: a task due in 3 s must not start before then.
	runAt := time.Now().Add(3 * time.Second)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "later", RunAt: runAt, WorkerIDs: []string{"stepped"}}, nil); err != nil {
		t.Fatal(err)
	}
	started := waitTime(t, starts, "the future task never started")
	if early := runAt.Sub(started); early > 100*time.Millisecond {
		t.Fatalf("the stepped worker started a task %s before its run_at", early)
	}
	if calls, most := counter.counts("held"); calls != 1 || most != 1 || ev.Count(mscheduler.EventExpired) != 0 {
		t.Fatalf("held task: %d handler calls, %d at once, %d expired: the stepped clock moved a live lease", calls, most, ev.Count(mscheduler.EventExpired))
	}
	// Back: a task due now must start at once, not 5 s late.
	clock.set(-5 * time.Second)
	published := time.Now()
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "now", WorkerIDs: []string{"stepped"}}, nil); err != nil {
		t.Fatal(err)
	}
	started = waitTime(t, starts, "the due task never started")
	if late := started.Sub(published); late > 2*time.Second {
		t.Fatalf("the stepped worker started a due task %s late", late)
	}
}

func waitTime(t *testing.T, ch <-chan time.Time, msg string) time.Time {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatal(msg)
		return time.Time{}
	}
}

// TestUnrenewablePingSettingsAreIgnored: ping settings edited by hand on a
// running task into an interval longer than the timeout would let the
// lease lapse between pings; the worker ignores them (saying so once) and
// its run lives on. Update refuses such an edit, naming the field.
func TestUnrenewablePingSettingsAreIgnored(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	wantInvalid(t, p.Update(ctxT(t), "k", mscheduler.TaskUpdate{PingInterval: ptr(5 * time.Second)}), "PingInterval")
	wantInvalid(t, p.Update(ctxT(t), "k", mscheduler.TaskUpdate{WorkerTimeout: ptr(50 * time.Millisecond)}), "WorkerTimeout")

	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	startConsumer(t, coll, holdUntil(release), fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	watch := fastConfig("watching", ev)
	watch.SweepInterval = 50 * time.Millisecond
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 2, nil }, watch)
	setFields(t, coll, "k", bson.D{{Key: "ping_interval_ms", Value: 5000}, {Key: "worker_timeout_ms", Value: 1000}})
	ev.WaitFor(t, "the settings to be ignored", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventError && e.Err != nil && strings.Contains(e.Err.Error(), "ignored") {
				return true
			}
		}
		return false
	})
	// Two lease lengths later the run still holds: pings went on.
	edited := leaseUntil(t, coll, "k", "w")
	waitLeaseBeyond(t, coll, "k", "w", edited.Add(2*time.Second))
	close(release)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	if len(st.Runs) != 1 || st.Runs[0].WorkerID != "w" || ev.Count(mscheduler.EventExpired) != 0 {
		t.Fatalf("task %+v: want the first worker's run to end it", st)
	}
	ignored := 0
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventError && e.Err != nil && strings.Contains(e.Err.Error(), "ignored") {
			ignored++
		}
	}
	if ignored != 1 {
		t.Fatalf("the ignored settings were reported %d times, want once", ignored)
	}
}

// leaseUntil reads a holder's lease.
func leaseUntil(t *testing.T, coll *mongo.Collection, key, worker string) time.Time {
	t.Helper()
	var doc struct {
		Holders map[string]struct {
			LeaseUntil time.Time `bson:"lease_until"`
		} `bson:"holders"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	h, ok := doc.Holders[worker]
	if !ok {
		t.Fatalf("%s holds no run of %s", worker, key)
	}
	return h.LeaseUntil
}

// waitLeaseBeyond waits until the holder's lease reaches past at; it fails
// if the holder loses its run first.
func waitLeaseBeyond(t *testing.T, coll *mongo.Collection, key, worker string, at time.Time) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for leaseUntil(t, coll, key, worker).Before(at) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("lease of %s never reached %s", worker, at)
		}
	}
}

// TestLapseCancelsHandlerWhateverOtherPingsDo: one worker holds two runs.
// Once a ping of one is being answered slowly (3 s, within its 5 s lease),
// the pings of the other are never answered. The second run's handler is
// cancelled when its own lease lapses, not when the slow ping returns.
func TestLapseCancelsHandlerWhateverOtherPingsDo(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := []mscheduler.Task[int]{
		{Key: "stalled", Priority: 1, PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond},
		{Key: "slow", PingInterval: 100 * time.Millisecond, WorkerTimeout: 5 * time.Second},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	var armed, slowStarted atomic.Bool
	var lastLease atomic.Int64 // of the stalled run, as last sent to the server
	_, client := newCmdProxy(t, func(name string, body bson.Raw) bool {
		filter := filterOf(name, body)
		if _, err := filter.LookupErr("holders.w.run"); err != nil {
			return false // not a ping
		}
		switch id, _ := filter.Lookup("_id").StringValueOK(); {
		case id == "slow" && armed.Load():
			slowStarted.Store(true)
			select {
			case <-time.After(3 * time.Second):
			case <-unblock:
			}
		case id == "stalled" && slowStarted.Load():
			<-unblock
		case id == "stalled": // passed through, armed or not: the slow ping may come first once armed
			if lease, ok := body.Lookup("update", "$set", "holders.w.lease_until").TimeOK(); ok {
				lastLease.Store(lease.UnixNano())
			}
		}
		return false
	})
	ev := mschedulertest.NewEvents()
	cancelled := make(chan time.Time, 1)
	cfg := fastConfig("w", ev)
	cfg.PingBatchMax = 1 // each run pinged alone, so that the proxy can hold one run's pings and not the other's
	startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		if task.Key == "stalled" {
			cancelled <- time.Now()
		}
		return 0, context.Cause(ctx)
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 2)
	waitForLeaseRenewal(t, coll, "stalled", "w")
	waitForLeaseRenewal(t, coll, "slow", "w")
	armed.Store(true)
	at := waitTime(t, cancelled, "the stalled run's handler was never cancelled")
	lease := time.Unix(0, lastLease.Load())
	if lastLease.Load() == 0 || at.Sub(lease) > 500*time.Millisecond {
		t.Fatalf("handler cancelled %s after its lease (%s) lapsed, want at the lapse", at.Sub(lease), lease)
	}
}

// TestPingRaceIsNotALostLease: between the two forms of one ping (the only
// holder's, and one of several), the number of holders of the task moves
// twice, so that both forms miss while the run still holds its slot. The
// ping reads again instead of calling the run taken over.
func TestPingRaceIsNotALostLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 2, PingInterval: 100 * time.Millisecond, WorkerTimeout: 10 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ghost := bson.D{{Key: "run", Value: "ghost-run"}, {Key: "started", Value: time.Now()}, {Key: "lease_until", Value: time.Now().Add(time.Hour)}}
	addGhost := func() {
		editTask(t, coll, "k", bson.D{{Key: "$set", Value: bson.D{{Key: "holders.ghost", Value: ghost}}}, {Key: "$inc", Value: bson.D{{Key: "running", Value: 1}, {Key: "free", Value: -1}}}})
	}
	removeGhost := func() {
		editTask(t, coll, "k", bson.D{{Key: "$unset", Value: bson.D{{Key: "holders.ghost", Value: ""}}}, {Key: "$inc", Value: bson.D{{Key: "running", Value: -1}, {Key: "free", Value: 1}}}})
	}
	addGhost()
	var step atomic.Int32 // 1: armed; 2: the first form went; 3: done
	played := make(chan struct{})
	_, client := newCmdProxy(t, func(name string, body bson.Raw) bool {
		filter := filterOf(name, body)
		if _, err := filter.LookupErr("holders.w.run"); err != nil {
			return false
		}
		_, sole := filter.Lookup("running").AsInt64OK()
		switch {
		case step.Load() == 1 && !sole: // the worker guesses several holders: leave it alone
			removeGhost()
			step.Store(2)
		case step.Load() == 2 && sole: // then guesses it is alone: another comes
			addGhost()
			step.Store(3)
			close(played)
		}
		return false
	})
	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	startConsumer(t, dbCollection(client, coll), holdUntil(release), fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	step.Store(1)
	waitSignal(t, played, "the race was never played")
	waitLeaseBeyond(t, coll, "k", "w", time.Now().Add(10*time.Second))
	close(release)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if n := ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Fatalf("%d lease lost events: the race was taken for a lost run", n)
	}
}

// TestLostClaimReplyIsFound: the server applies a claim and its reply is
// lost (the connection drops; without retryable writes the driver does not
// resend it). The worker finds the claim by its run id and runs the task:
// no orphaned run lapses into a failed one, even with MaxFailedRuns 1.
func TestLostClaimReplyIsFound(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxFailedRuns: 1, PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	proxy, client := newCmdProxy(t, nil)
	proxy.dropIf = func(name string, body, reply bson.Raw) bool {
		_, found := reply.Lookup("value").DocumentOK()
		n, _ := reply.Lookup("n").AsInt64OK()
		return isClaim(name, body) && (found || n > 0) && dropped.CompareAndSwap(false, true)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, fastConfig("w", ev))
	waitStatus(t, ev, coll, "k", "succeeded")
	st := readTask(t, coll, "k")
	if !dropped.Load() || len(st.Runs) != 1 || st.Runs[0].Outcome != "succeeded" || st.FailedRuns != 0 {
		t.Fatalf("task %+v (reply dropped: %v): want one run, succeeded", st, dropped.Load())
	}
}

// TestKilledHolderOfConcurrencyThreeIsRecoveredOnTime: two workers claim a
// concurrency-3 task at once, then a third worker process claims its last
// slot, pings, and is SIGKILLed. Its run is recorded expired within a
// sweep interval (and a second) of its lease lapsing, not after the 30 s a
// claim's lease is stored with.
func TestKilledHolderOfConcurrencyThreeIsRecoveredOnTime(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	const timeout, sweep = 1500 * time.Millisecond, 200 * time.Millisecond
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 3, PingInterval: 300 * time.Millisecond, WorkerTimeout: timeout}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	defer close(release)
	hold := func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	}
	for _, id := range []string{"a", "b"} {
		cfg := fastConfig(id, ev)
		cfg.SweepInterval = sweep
		startConsumer(t, coll, hold, cfg)
	}
	ev.WaitCount(t, mscheduler.EventClaimed, 2)
	cmd, _ := startCrashWorker(t, coll)
	waitForLeaseRenewal(t, coll, "k", "doomed")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ev.WaitCount(t, mscheduler.EventExpired, 1)
	dead := readTask(t, coll, "k").Runs[0]
	if dead.WorkerID != "doomed" || dead.Outcome != "expired" {
		t.Fatalf("first run record %+v, want the killed worker's, expired", dead)
	}
	if late := dead.Finished.Sub(leaseOf(t, coll, dead.RunID)); late > sweep+time.Second {
		t.Fatalf("killed run recorded expired %s after its lease lapsed, want within %s", late, sweep+time.Second)
	}
}

// leaseOf is the lease a finished run had when it ended.
func leaseOf(t *testing.T, coll *mongo.Collection, runID string) time.Time {
	t.Helper()
	var doc struct {
		Runs []struct {
			RunID      string    `bson:"run_id"`
			LeaseUntil time.Time `bson:"lease_until"`
		} `bson:"runs"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Runs {
		if r.RunID == runID {
			return r.LeaseUntil
		}
	}
	t.Fatalf("no run %s", runID)
	return time.Time{}
}

// TestRunKilledBeforeFirstPingIsRecoveredOnTime: a worker process claims a
// task and is SIGKILLed before its first ping. Its run is recorded expired
// within the task's worker timeout plus a sweep interval (and a second)
// of its start, not after the 30 s the claim stored.
func TestRunKilledBeforeFirstPingIsRecoveredOnTime(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	const timeout, sweep = 1500 * time.Millisecond, 200 * time.Millisecond
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: time.Second, WorkerTimeout: timeout}, nil); err != nil {
		t.Fatal(err)
	}
	cmd, started := startCrashWorker(t, coll)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("rescuer", ev)
	cfg.SweepInterval = sweep
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	dead := st.Runs[0]
	if dead.RunID != started.runID || dead.Outcome != "expired" {
		t.Fatalf("first run record %+v, want the killed run, expired", dead)
	}
	if took := dead.Finished.Sub(dead.Started); took > timeout+sweep+time.Second {
		t.Fatalf("killed run recorded expired %s after its claim, want within %s", took, timeout+sweep+time.Second)
	}
}
