package mscheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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

// slowClient is a client whose every command is held by delay on its way
// to the test server. The slowest round trips of its claims and pings are
// logged when the test fails (or runs verbose): the delay is what the test sets, plus the
// time the loaded test server takes.
func slowClient(t *testing.T, delay mschedulertest.Delay) *mongo.Client {
	t.Helper()
	p, err := mschedulertest.StartDelayProxy(singleHost(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	trips := &roundTrips{}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("slowest round trips through the proxy: %s", trips)
		}
		if t.Failed() {
			t.Logf("commands through the proxy:\n%s", strings.Join(trips.trace, "\n"))
		}
	})
	return mschedulertest.NewClient(t, options.Client().ApplyURI(p.URI()).SetMonitor(trips.monitor()))
}

// roundTrips keeps the slowest round trip of each command name, and
// when each command was sent (after its connection was checked out) and
// answered.
type roundTrips struct {
	mu      sync.Mutex
	slowest map[string]time.Duration
	trace   []string
}

func (r *roundTrips) monitor() *event.CommandMonitor {
	note := func(line string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.trace = append(r.trace, time.Now().Format("15:04:05.000 ")+line)
	}
	took := func(name string, id int64, d time.Duration) {
		note(fmt.Sprintf("#%d %s answered after %s", id, name, d.Round(time.Millisecond)))
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.slowest == nil {
			r.slowest = map[string]time.Duration{}
		}
		r.slowest[name] = max(r.slowest[name], d)
	}
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			note(fmt.Sprintf("#%d %s sent on %s", e.RequestID, e.CommandName, e.ConnectionID))
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { took(e.CommandName, e.RequestID, e.Duration) },
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			took(e.CommandName+"(failed: "+e.Failure.Error()+")", e.RequestID, e.Duration)
		},
	}
}

func (r *roundTrips) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := slices.Sorted(maps.Keys(r.slowest))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %s", n, r.slowest[n].Round(time.Millisecond))
	}
	return strings.Join(parts, ", ")
}

// warnLog keeps the messages of a consumer's WARN records.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *warnLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }

func (l *warnLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// publishLeased publishes n tasks s-00... that only worker may run (any,
// if ""), with leases of timeout pinged every interval, failed for good
// after maxFailed runs that failed or lapsed.
func publishLeased(t *testing.T, coll *mongo.Collection, n int, worker string, interval, timeout time.Duration, maxFailed int) []string {
	t.Helper()
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	keys := make([]string, n)
	for i := range tasks {
		keys[i] = fmt.Sprintf("s-%02d", i)
		tasks[i] = mscheduler.Task[int]{Key: keys[i], PingInterval: interval, WorkerTimeout: timeout, MaxFailedRuns: maxFailed}
		if worker != "" {
			tasks[i].WorkerIDs = []string{worker}
		}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	return keys
}

// runOnTwoSecondServer starts worker "slow", of 4 slots, whose every
// command takes 2 s, and beside it worker "watching", on a fast path,
// which sweeps every 100 ms and would expire any lease that lapsed. Their
// handlers run 6 s each, counted by key.
func runOnTwoSecondServer(t *testing.T, coll *mongo.Collection) (*mschedulertest.Events, *runCounter) {
	t.Helper()
	counter := newRunCounter()
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer counter.begin(task.Key)()
		select {
		case <-time.After(6 * time.Second):
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	ev := mschedulertest.NewEvents()
	slow := fastConfig("slow", ev)
	slow.Capacity = 4
	slow.Logger = logOnFailure(t)
	startConsumer(t, dbCollection(slowClient(t, mschedulertest.FixedDelay(2*time.Second)), coll), handler, slow)
	watch := fastConfig("watching", ev)
	watch.SweepInterval = 100 * time.Millisecond
	startConsumer(t, coll, handler, watch)
	return ev, counter
}

// TestTwoSecondServerKeepsEveryLease: every command of the worker takes
// 2 s, its tasks' leases are 5 s and its handlers run 6 s, so that each
// run lives on pings alone. No lease is lost, no handler runs twice, and
// every task succeeds at its first run; a second worker beside it, on a
// fast path, sweeps every 100 ms and would expire any lease that lapsed.
func TestTwoSecondServerKeepsEveryLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	keys := publishLeased(t, coll, 4, "slow", 2*time.Second, 5*time.Second, 1)
	ev, counter := runOnTwoSecondServer(t, coll)

	ev.WaitCountWithin(t, 2*time.Minute, mscheduler.EventSucceeded, len(keys))
	for _, key := range keys {
		st := readTask(t, coll, key)
		if calls, _ := counter.counts(key); calls != 1 || st.Status != "succeeded" || len(st.Runs) != 1 {
			t.Errorf("%s: handler ran %d times; task %+v: want one run, succeeded", key, calls, st)
		}
	}
	if n := ev.Count(mscheduler.EventExpired) + ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Errorf("%d leases expired or lost on a server answering in 2 s", n)
	}
}

// TestTwoSecondServerKeepsLeasesOfTasksClaimedWithAReadBack: as above,
// but the tasks have concurrency 2 (two runs each), whose batch claims
// need a read back:
// the write and the read back would take 4 s of the 5 s lease before the
// first ping (2 s more) could land. The worker claims them one by one with
// a findAndModify instead, whose reply is the task as claimed, and keeps
// every lease.
func TestTwoSecondServerKeepsLeasesOfTasksClaimedWithAReadBack(t *testing.T) {
	t.Parallel() // it waits on the delay most of its minute
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	keys := []string{"c-0", "c-1"}
	for _, key := range keys {
		task := mscheduler.Task[int]{Key: key, Concurrency: 2, WorkerIDs: []string{"slow"}, PingInterval: 2 * time.Second, WorkerTimeout: 5 * time.Second, MaxFailedRuns: 1}
		if _, err := p.Publish(ctxT(t), task, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev, counter := runOnTwoSecondServer(t, coll)

	// Two successful runs complete a task of concurrency 2, one after the
	// other here: a worker never holds two runs of one task.
	ev.WaitCountWithin(t, 2*time.Minute, mscheduler.EventSucceeded, 2*len(keys))
	for _, key := range keys {
		if calls, _ := counter.counts(key); calls != 2 {
			t.Errorf("%s: handler ran %d times, want twice", key, calls)
		}
	}
	if n := ev.Count(mscheduler.EventExpired) + ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Errorf("%d leases expired or lost on a server answering in 2 s", n)
	}
}

// TestTaskWhoseTimeoutTheServerCannotKeepRunsAtALongerLease: every command
// of the worker takes 2 s, so a claim and its first ping take 4 s, more
// than the tasks' 3 s worker timeout: the worker says so once per task and
// runs each at a longer lease recorded on the run (lease_ms), kept by its
// pings; its handlers run 6 s, twice the worker timeout. No lease is lost
// or expired (a second worker on a fast path sweeps every 100 ms), each
// task runs once, and nothing is left pending.
func TestTaskWhoseTimeoutTheServerCannotKeepRunsAtALongerLease(t *testing.T) {
	t.Parallel() // it waits on the delay most of its minute
	coll := mschedulertest.Collection(t)
	const timeout = 3 * time.Second
	keys := publishLeased(t, coll, 2, "slow", time.Second, timeout, 1)
	counter := newRunCounter()
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		defer counter.begin(task.Key)()
		select {
		case <-time.After(2 * timeout):
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	ev := mschedulertest.NewEvents()
	warns := &warnLog{}
	slow := fastConfig("slow", ev)
	slow.Capacity, slow.Logger = 4, slog.New(warns)
	startConsumer(t, dbCollection(slowClient(t, mschedulertest.FixedDelay(2*time.Second)), coll), handler, slow)
	watch := fastConfig("watching", ev)
	watch.SweepInterval = 100 * time.Millisecond
	startConsumer(t, coll, handler, watch)

	ev.WaitCountWithin(t, 2*time.Minute, mscheduler.EventSucceeded, len(keys))
	if n := ev.Count(mscheduler.EventExpired) + ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Errorf("%d leases expired or lost", n)
	}
	for _, key := range keys {
		if calls, _ := counter.counts(key); calls != 1 {
			t.Errorf("%s: handler ran %d times, want once", key, calls)
		}
		raw, err := coll.FindOne(ctxT(t), bson.D{{Key: "key", Value: key}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		leaseMS, _ := raw.Lookup("runs", "0", "lease_ms").AsInt64OK()
		status, _ := raw.Lookup("status").StringValueOK()
		// At 2 s round trips: twice a claim and a first ping, 2 × (2 × 2 s + 250 ms).
		if status != "succeeded" || leaseMS < 8500 {
			t.Errorf("%s: status %q, run's lease_ms %d; want succeeded at a lease of at least 8.5 s", key, status, leaseMS)
		}
	}
	if n := warns.count("server too slow to keep the task's worker timeout"); n != len(keys) {
		t.Errorf("said %d times that a task runs at a longer lease, want once per task (%d): %q", n, len(keys), warns.msgs)
	}
}

// logOnFailure is a logger whose records (INFO and above) are written to
// the test's log if it fails.
func logOnFailure(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var out strings.Builder
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the worker's log:\n%s", out.String())
		}
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &out}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// adjustableDelay is a delay a test sets as it goes.
type adjustableDelay struct{ d atomic.Int64 }

func (a *adjustableDelay) set(d time.Duration) { a.d.Store(int64(d)) }
func (a *adjustableDelay) delay(string, time.Duration) time.Duration {
	return time.Duration(a.d.Load())
}

// TestGrowingDelayThrottlesThenRecovers: the server answers one worker
// slower and slower, past its tasks' 5 s lease. The worker takes less,
// and says so, and that the server is too slow for the tasks' lease (runs
// it claims then get a longer one, see
// TestTaskWhoseTimeoutTheServerCannotKeepRunsAtALongerLease), but never
// stops taking work; a second worker joins; every task is done. Once the
// delay is gone and the work done, the first worker is back to its full
// capacity within 30 s.
func TestGrowingDelayThrottlesThenRecovers(t *testing.T) {
	coll := mschedulertest.Collection(t)
	keys := publishLeased(t, coll, 200, "", time.Second, 5*time.Second, 10)
	var delay adjustableDelay
	warns := &warnLog{}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("slowing", ev)
	cfg.Capacity, cfg.Logger = 8, slog.New(warns)
	// Its recovery is measured by its polls: as often with a change stream
	// open as without (the stream's poll is 15 s, and the other worker's
	// run ends, which leave their tasks final, wake no one).
	cfg.ChangeStreamPollInterval = cfg.PollInterval
	handler := func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	slowing := startConsumer(t, dbCollection(slowClient(t, delay.delay), coll), handler, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 8)

	// The delay grows by 250 ms every 250 ms, up to 4 s: a claim and its
	// first ping no longer fit in a 5 s lease.
	for d := 250 * time.Millisecond; d <= 4*time.Second; d += 250 * time.Millisecond {
		delay.set(d)
		<-time.After(250 * time.Millisecond)
	}
	waitUntil(t, time.Minute, "the slowed worker to take less", func() bool { return slowing.Pressure().Limit < cfg.Capacity })
	waitUntil(t, time.Minute, "a WARN that the server is too slow for the tasks' lease", func() bool {
		return warns.count("server too slow to keep the shortest worker timeout") > 0
	})
	if warns.count("server slow") == 0 {
		t.Errorf("no WARN when throttling: %q", warns.msgs)
	}
	// Its slots may all be held by runs whose ends are on their way when
	// the limit falls: the free slots it leaves are counted as they free.
	waitUntil(t, time.Minute, "a free slot left unclaimed to be counted", func() bool { return slowing.Pressure().HeldBack > 0 })

	rescue := fastConfig("rescuing", ev)
	rescue.Capacity, rescue.SweepInterval = 16, 200*time.Millisecond
	startConsumer(t, coll, handler, rescue)
	<-time.After(3 * time.Second) // runs the slowed worker claimed before a stretch fitted may lapse meanwhile
	delay.set(0)
	waitUntil(t, waitTimeout, "every task done", func() bool {
		n, err := coll.CountDocuments(ctxT(t), bson.D{{Key: "status", Value: "succeeded"}})
		return err == nil && n == int64(len(keys))
	})
	// With the work done the server is idle again (the other worker's
	// load is gone too), and the worker's polls measure it.
	waitUntil(t, 30*time.Second, "the worker back at full capacity", func() bool { return slowing.Pressure().Limit == cfg.Capacity })
}

// runEndFailer refuses the run end commands of a worker through a proxy
// while failing is set, and notes when each came.
type runEndFailer struct {
	failing atomic.Bool
	mu      sync.Mutex
	tries   []time.Time
}

func failRunEnds(proxy *cmdProxy, worker string) *runEndFailer {
	f := &runEndFailer{}
	proxy.failIf = func(name string, body bson.Raw) bool {
		if !f.failing.Load() || !isRunEnd(name, body, worker) {
			return false
		}
		f.mu.Lock()
		f.tries = append(f.tries, time.Now())
		f.mu.Unlock()
		return true
	}
	return f
}

func (f *runEndFailer) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tries)
}

// TestRunEndRetriesBackOffWithinBudget: the ends of 20 runs fail (the
// connection closes before the server sees them) for 4 s. Each run end is
// tried again after growing pauses, and all of them together stay within
// the retry budget: a burst of 10, 2 a second, and a tenth of a retry for
// each command that succeeded meanwhile. Once the server is reachable
// again, every run is recorded succeeded, once.
func TestRunEndRetriesBackOffWithinBudget(t *testing.T) {
	coll := mschedulertest.Collection(t)
	keys := publishLeased(t, coll, 20, "", time.Second, 30*time.Second, 1)
	var succeeded atomic.Int64
	proxy, client := newCmdProxy(t, func(string, bson.Raw) bool {
		succeeded.Add(1) // forwarded: the server answers it
		return false
	})
	f := failRunEnds(proxy, "w")
	release := make(chan struct{})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 20
	c := startConsumer(t, dbCollection(client, coll), holdUntil(release), cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, len(keys))
	f.failing.Store(true)
	start := time.Now()
	close(release)
	// The first tries go at once (one batch, or a few); after a second only
	// retries are left.
	<-time.After(time.Second)
	from, before := time.Now(), succeeded.Load()
	<-time.After(3 * time.Second)
	to, earned := time.Now(), succeeded.Load()-before
	f.failing.Store(false)

	tries := f.times()
	retries := 0
	for _, at := range tries {
		if !at.Before(from) && at.Before(to) {
			retries++
		}
	}
	total := len(tries)
	if budget := 10 + 2*to.Sub(from).Seconds() + 0.1*float64(earned) + 2; float64(retries) > budget {
		t.Errorf("%d run end retries refused from 1 s to 4 s (%d commands answered meanwhile), want at most %.0f", retries, earned, budget)
	}
	if total < len(keys)/2 {
		t.Errorf("%d run end commands in %v: the ends were not tried again", total, time.Since(start))
	}
	if p := c.Pressure(); p.Retries == 0 || p.RetriesWaited == 0 {
		t.Errorf("pressure %+v: want retries counted, some of them waiting for the budget", p)
	}
	ev.WaitCountWithin(t, time.Minute, mscheduler.EventSucceeded, len(keys))
	for _, key := range keys {
		if st := readTask(t, coll, key); st.Status != "succeeded" || len(st.Runs) != 1 {
			t.Errorf("%s: %+v, want one run, succeeded", key, st)
		}
	}
}

// TestOneRunEndBacksOff: a single run end that keeps failing is tried
// again after pauses that grow, not at a fixed pace.
func TestOneRunEndBacksOff(t *testing.T) {
	coll := mschedulertest.Collection(t)
	publishLeased(t, coll, 1, "", time.Second, 30*time.Second, 1)
	proxy, client := newCmdProxy(t, nil)
	f := failRunEnds(proxy, "w")
	release := make(chan struct{})
	ev := mschedulertest.NewEvents()
	startConsumer(t, dbCollection(client, coll), holdUntil(release), fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	f.failing.Store(true)
	close(release)
	<-time.After(4 * time.Second)
	f.failing.Store(false)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)

	tries := f.times()
	if len(tries) < 4 || len(tries) > 8 {
		t.Fatalf("%d tries in 4 s, want 4 to 8 (pauses of 100 ms doubling, jittered)", len(tries))
	}
	// Each pause is drawn from half to all of a pause that doubles (from
	// 100 ms): the last is far longer than the first.
	first, last := tries[1].Sub(tries[0]), tries[len(tries)-1].Sub(tries[len(tries)-2])
	if last < 2*first {
		t.Errorf("pauses %v then %v: want them growing", first, last)
	}
}

// TestClaimSlowerThanWriteTimeoutIsKept: every command takes 1.5 s, longer
// than the worker's 1 s WriteTimeout but far within the 30 s leases its
// claims take. A claim is waited for, not given up on and redone: every
// task runs once, no claim fails, and no run is released unrun.
func TestClaimSlowerThanWriteTimeoutIsKept(t *testing.T) {
	coll := mschedulertest.Collection(t)
	keys := publishLeased(t, coll, 8, "slow", 5*time.Second, 30*time.Second, 1)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("slow", ev)
	cfg.Capacity = 8
	cfg.WriteTimeout = time.Second
	cfg.Logger = logOnFailure(t)
	startConsumer(t, dbCollection(slowClient(t, mschedulertest.FixedDelay(1500*time.Millisecond)), coll),
		func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)

	ev.WaitCountWithin(t, 2*time.Minute, mscheduler.EventSucceeded, len(keys))
	for _, key := range keys {
		if st := readTask(t, coll, key); st.Status != "succeeded" || len(st.Runs) != 1 {
			t.Errorf("%s: %+v; want one run, succeeded", key, st)
		}
	}
	claimErrors := 0
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventError && strings.Contains(e.Err.Error(), "claim") {
			claimErrors++
		}
	}
	if n := ev.Count(mscheduler.EventReleased); n+claimErrors != 0 {
		t.Errorf("%d runs released unrun and %d claims given up on", n, claimErrors)
	}
}

// slowPings is a log handler that takes 100 ms to write each record of a
// ping sent, as a pinger that waits for a core on a busy machine; it
// drops every record.
type slowPings struct{}

func (slowPings) Enabled(context.Context, slog.Level) bool { return true }
func (slowPings) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "ping" {
		<-time.After(100 * time.Millisecond)
	}
	return nil
}
func (h slowPings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h slowPings) WithGroup(string) slog.Handler      { return h }

// TestFirstPingGoesBeforeTheNextClaimCommand: the worker has one
// connection, as one whose connections are all in use, and the claim
// loop's reads, its claims, pings and run ends take 1 s each. A task's
// lease is 3 s: its claim leaves 2 s, enough for its first ping, not for
// that ping and the claim loop's next command before it. The pinger is
// slow to send (100 ms), and the claim loop, which runs on at once, would
// take the connection its claim gave back: it lets the first ping go
// first, and the run's first ping renews its lease before it lapses.
func TestFirstPingGoesBeforeTheNextClaimCommand(t *testing.T) {
	coll := mschedulertest.Collection(t)
	publishLeased(t, coll, 1, "w", 500*time.Millisecond, 3*time.Second, 1)
	proxy, _ := newCmdProxy(t, func(name string, body bson.Raw) bool {
		onTasks, _ := body.Lookup(name).StringValueOK()
		claimRead := body.Lookup("sort", "priority").Type != 0 || body.Lookup("sort", "run_at").Type != 0
		if onTasks == coll.Name() && (name == "find" && claimRead || name == "update" || name == "findAndModify") {
			<-time.After(time.Second) // the claim loop's reads, claims, pings and run ends
		}
		return false
	})
	client := mschedulertest.NewClient(t, options.Client().SetHosts([]string{proxy.ln.Addr().String()}).SetDirect(true).SetMaxPoolSize(1))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.Logger = 1, slog.New(slowPings{})
	cfg.SweepInterval, cfg.MaintenanceInterval, cfg.CheckInterval = time.Hour, time.Hour, time.Hour
	// A change stream's getMore would hold the one connection for up to a second at a time.
	cfg.Discovery = mscheduler.DiscoveryPoll
	release := make(chan struct{})
	defer close(release)
	startConsumer(t, dbCollection(client, coll), holdUntil(release), cfg)

	ev.WaitFor(t, "the run's first ping, or its lease lost", func(es []mscheduler.Event) bool {
		return slices.ContainsFunc(es, func(e mscheduler.Event) bool {
			return e.Kind == mscheduler.EventRenewed || e.Kind == mscheduler.EventLeaseLost
		})
	})
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventLeaseLost {
			t.Fatalf("the run's lease was lost before its first ping renewed it: %v", e.Err)
		}
		if e.Kind == mscheduler.EventRenewed {
			return
		}
	}
}
