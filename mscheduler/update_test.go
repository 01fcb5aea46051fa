package mscheduler_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func ptr[T any](v T) *T { return &v }

// TestMetadataRoundTrip: description, source and tags set at publish are
// read back, updated, and filtered on (tags through their index).
func TestMetadataRoundTrip(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Defaults: mscheduler.TaskDefaults{Source: "billing-api"}})
	_, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{
		{Key: "a", Description: "monthly report", Tags: []string{"reports", "monthly"}},
		{Key: "b", Description: "daily report", Tags: []string{"reports"}, Source: "cron-host"},
		{Key: "c", Tags: []string{"email"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Get(ctxT(t), "a")
	if err != nil || a.Task.Description != "monthly report" || a.Task.Source != "billing-api" || !slices.Equal(a.Task.Tags, []string{"reports", "monthly"}) || a.Status != mscheduler.StatusPending {
		t.Fatalf("Get(a) = %+v, %v", a, err)
	}
	if err := p.Update(ctxT(t), "c", mscheduler.TaskUpdate{Description: ptr("welcome mail"), Tags: ptr([]string{"email", "reports"})}); err != nil {
		t.Fatal(err)
	}
	reports, err := p.List(ctxT(t), mscheduler.ListOpts{Tags: []string{"reports"}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range reports {
		keys = append(keys, r.Task.Key)
	}
	if !slices.Equal(keys, []string{"a", "b", "c"}) {
		t.Fatalf("tasks tagged reports = %v, want a b c", keys)
	}
	if both, _ := p.List(ctxT(t), mscheduler.ListOpts{Tags: []string{"reports", "monthly"}}); len(both) != 1 || both[0].Task.Key != "a" {
		t.Fatalf("tasks tagged reports and monthly = %+v, want a", both)
	}
	if c, _ := p.Get(ctxT(t), "c"); c.Task.Description != "welcome mail" || c.Task.Source != "billing-api" {
		t.Fatalf("c after update = %+v", c.Task)
	}
	if _, err := p.Get(ctxT(t), "nope"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	before := readTask(t, coll, "a")
	wantInvalid(t, p.Update(ctxT(t), "a", mscheduler.TaskUpdate{Tags: ptr([]string{""})}), "Tags[0]")
	wantInvalid(t, p.Update(ctxT(t), "a", mscheduler.TaskUpdate{PingInterval: ptr(time.Hour)}), "PingInterval")
	wantInvalid(t, p.Update(ctxT(t), "a", mscheduler.TaskUpdate{Concurrency: ptr(0)}), "Concurrency")
	if after := readTask(t, coll, "a"); after.RunAt != before.RunAt || after.Free != before.Free {
		t.Fatalf("a refused update wrote: %+v -> %+v", before, after)
	}
}

// TestConcurrencyChangeWhileRunning: lowering concurrency below the runs
// going starts no new run and cancels none; raising it again makes the
// task claimable for the missing successes.
func TestConcurrencyChangeWhileRunning(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 3}, nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Key == "k" {
			<-release
		}
		return 0, nil
	}
	ev := mschedulertest.NewEvents()
	for _, w := range []string{"w1", "w2"} {
		cfg := fastConfig(w, ev)
		cfg.Capacity = 1
		startConsumer(t, coll, handler, cfg)
	}
	ev.WaitCount(t, mscheduler.EventClaimed, 2)
	if err := p.Update(ctxT(t), "k", mscheduler.TaskUpdate{Concurrency: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	startConsumer(t, coll, handler, fastConfig("w3", ev))
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "probe", WorkerIDs: []string{"w3"}}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1) // w3 polled and ran the probe
	if st := readTask(t, coll, "k"); st.Running != 2 || len(st.Holders) != 2 {
		t.Fatalf("after lowering concurrency: %+v, want the 2 runs going and no third", st)
	}
	close(release)
	ev.WaitCount(t, mscheduler.EventSucceeded, 3)
	if st := readTask(t, coll, "k"); st.Status != "succeeded" || st.Succeeded != 2 {
		t.Fatalf("after the runs ended: %+v, want succeeded with both successes", st)
	}
	if err := p.Update(ctxT(t), "k", mscheduler.TaskUpdate{Concurrency: ptr(3)}); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 4)
	if st := readTask(t, coll, "k"); st.Status != "succeeded" || st.Succeeded != 3 || st.Free != 0 {
		t.Fatalf("after raising concurrency: %+v, want a third success", st)
	}
}

// TestRaisedConcurrencyWakesWaitingWorker: a worker that polls and sweeps
// once an hour, and has looked and found nothing, claims the slot a
// concurrency raise opens at once, woken by the producer of its own process
// (its own client), on any server.
func TestRaisedConcurrencyWakesWaitingWorker(t *testing.T) {
	testRaiseWakes(t, true, mscheduler.DiscoveryAuto)
}

// TestRaisedConcurrencyWakesWorkerOfAnotherProcess: the same through a
// producer on another client, which only a change stream can carry.
func TestRaisedConcurrencyWakesWorkerOfAnotherProcess(t *testing.T) {
	if !mschedulertest.HasChangeStreams(ctxT(t), mschedulertest.Collection(t)) {
		t.Skip("this server has no change streams; waking another process's worker on a change needs a replica set or the development server's emulated streams (MSCHEDULER_DEV_NO_CHANGE_STREAMS unset)")
	}
	testRaiseWakes(t, false, mscheduler.DiscoveryChangeStream)
}

func testRaiseWakes(t *testing.T, sameClient bool, discovery mscheduler.Discovery) {
	coll := mschedulertest.Collection(t)
	if _, err := newProducer[int](t, coll, nil).Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 1, DistinctWorkers: true}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("first", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)

	// The waiting worker has its own client, watched so that the raise comes
	// after its first claim found nothing; it could not come earlier, or
	// that first claim would take the slot without any wake.
	own, claimTried := watchedCollection(t)
	waiting := fastConfig("waiting", ev)
	waiting.Discovery = discovery
	waiting.PollInterval, waiting.ChangeStreamPollInterval, waiting.SweepInterval = time.Hour, time.Hour, time.Hour
	startConsumer(t, own, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, waiting)
	waitSignal(t, claimTried, "the waiting worker never tried to claim")
	p := newProducer[int](t, coll, nil)
	if sameClient {
		p = newProducer[int](t, own, nil)
	}
	if err := p.Update(ctxT(t), "k", mscheduler.TaskUpdate{Concurrency: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	ev.WaitCountWithin(t, 30*time.Second, mscheduler.EventSucceeded, 2) // an hour's poll would fail this
	if st := readTask(t, coll, "k"); st.Succeeded != 2 || st.Runs[1].WorkerID != "waiting" {
		t.Fatalf("task = %+v, want the waiting worker's success", st)
	}
}

// TestPingSettingsChangeWhileRunning: a shorter ping_interval and
// worker_timeout reach a run going from its next ping: the lease it keeps
// shrinks to the new worker timeout, and pings come at the new interval.
func TestPingSettingsChangeWhileRunning(t *testing.T) {
	// Pings, unlike claims, are findAndModify commands fenced on the run.
	pings := make(chan struct{}, 1000)
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if _, err := e.Command.LookupErr("query", "holders.w.run"); e.CommandName == "findAndModify" && err == nil {
			select {
			case pings <- struct{}{}:
			default:
			}
		}
	}}
	coll := mschedulertest.Collection(t)
	own := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor)).Database(coll.Database().Name()).Collection(coll.Name())
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "k", PingInterval: time.Second, WorkerTimeout: 20 * time.Second}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	defer close(release)
	startConsumer(t, own, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	for len(pings) > 0 { // the claim, and pings before the change
		<-pings
	}
	if err := p.Update(ctxT(t), "k", mscheduler.TaskUpdate{PingInterval: ptr(50 * time.Millisecond), WorkerTimeout: ptr(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// A ping may have been under way during the change; the next one reads
	// the new settings, the one after writes the new lease, and the start
	// of a fourth says that write is done (a run's pings go one at a time).
	for range 4 {
		waitSignal(t, pings, "no ping after the change")
	}
	if left := leaseLeft(t, coll); left > 3*time.Second {
		t.Fatalf("lease left %s, want the new 2 s worker timeout applied", left)
	}
	// At the old 1 s interval, 2 s hold two pings; at the new one, about 40.
	window := time.After(2 * time.Second)
	for i := range 5 {
		select {
		case <-pings:
		case <-window:
			t.Fatalf("%d pings in 2 s, want the new 50 ms interval", i)
		}
	}
}

// leaseLeft is how long the lease of the only holder of task "k" has to
// run, by the local clock (the development server shares it).
func leaseLeft(t *testing.T, coll *mongo.Collection) time.Duration {
	t.Helper()
	var doc struct {
		Holders map[string]struct {
			LeaseUntil time.Time `bson:"lease_until"`
		} `bson:"holders"`
	}
	if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, h := range doc.Holders {
		return time.Until(h.LeaseUntil)
	}
	t.Fatal("no holder")
	return 0
}

// TestListByKeyPrefix: KeyPrefix selects keys that start with it, taken
// literally (a "." is no wildcard), and pages with After.
func TestListByKeyPrefix(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	var tasks []mscheduler.Task[int]
	for _, k := range []string{"mail.1", "mail.2", "mail.3", "mailx", "report.1", "amail.1"} {
		tasks = append(tasks, mscheduler.Task[int]{Key: k, RunAt: time.Now().Add(time.Hour)})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	keys := func(opts mscheduler.ListOpts) []string { return listKeys(t, p, opts) }
	if got := keys(mscheduler.ListOpts{KeyPrefix: "mail."}); !slices.Equal(got, []string{"mail.1", "mail.2", "mail.3"}) {
		t.Errorf("prefix mail.: %q", got)
	}
	if got := keys(mscheduler.ListOpts{KeyPrefix: "mail.", After: "mail.1", Limit: 1}); !slices.Equal(got, []string{"mail.2"}) {
		t.Errorf("prefix mail. after mail.1: %q", got)
	}
}

// TestListRecurring: Recurring selects the tasks that have a plan, and
// pages with After.
func TestListRecurring(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	hourly := mscheduler.Every(1, mscheduler.Hour)
	tasks := []mscheduler.Task[int]{
		{Key: "a-once", RunAt: time.Now().Add(time.Hour)},
		{Key: "b-hourly", Plan: &hourly},
		{Key: "c-once"},
		{Key: "d-hourly", Plan: &hourly},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	keys := func(opts mscheduler.ListOpts) []string { return listKeys(t, p, opts) }
	if got := keys(mscheduler.ListOpts{Recurring: true}); !slices.Equal(got, []string{"b-hourly", "d-hourly"}) {
		t.Errorf("recurring: %q", got)
	}
	if got := keys(mscheduler.ListOpts{Recurring: true, After: "b-hourly", Limit: 1}); !slices.Equal(got, []string{"d-hourly"}) {
		t.Errorf("recurring after b-hourly: %q", got)
	}
}
