package mscheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Races between two commands of one worker's operation: a HoldProxy stops
// the worker between them while the test acts.

// heldCollection is the test's collection reached through a HoldProxy of
// its own: a worker started on it can be stopped between two commands.
func heldCollection(t *testing.T, coll *mongo.Collection, split bool) (*mschedulertest.HoldProxy, *mongo.Collection) {
	t.Helper()
	p, client := heldClient(t, singleHost(t), split)
	return p, client.Database(coll.Database().Name()).Collection(coll.Name())
}

// heldClient is a client of its own through a new HoldProxy in front of
// host.
func heldClient(t *testing.T, host string, split bool) (*mschedulertest.HoldProxy, *mongo.Client) {
	t.Helper()
	p, err := mschedulertest.StartHoldProxy(host, mschedulertest.HoldOptions{Split: split})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last in first: the consumers stop, then the client, then
	// the proxy, which lets anything still held go.
	t.Cleanup(p.Close)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return p, client
}

// waitHeld waits until h holds a command.
func waitHeld(t *testing.T, h *mschedulertest.Hold, what string) mschedulertest.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cmd, err := h.Wait(ctx)
	if err != nil {
		t.Fatalf("waiting for %s to be held: %v", what, err)
	}
	return cmd
}

// ranLog records the runs a handler started: key and planned time.
type ranLog struct {
	mu   sync.Mutex
	runs []plannedRun
}

func (l *ranLog) handler() mscheduler.Handler[int, int] {
	return func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		l.mu.Lock()
		l.runs = append(l.runs, plannedRun{planned: task.Run.PlannedAt, worker: task.Run.WorkerID, runID: task.Run.ID})
		l.mu.Unlock()
		return 0, nil
	}
}

func (l *ranLog) all() []plannedRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]plannedRun(nil), l.runs...)
}

// publishSkippedOccurrence publishes an hourly plan whose first planned
// time is due now, then asks to skip it.
func publishSkippedOccurrence(t *testing.T, p *mscheduler.Producer[int], concurrency int) {
	t.Helper()
	plan := mscheduler.Every(1, mscheduler.Hour)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan, Concurrency: concurrency}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.SkipNext(ctxT(t), "k", 1); err != nil {
		t.Fatal(err)
	}
}

// TestCancelDuringPlanGateWins: a worker claims a plan's occurrence that
// is to be skipped; a cancel lands before its gate gives the slot back.
// The cancel stands: the task stays cancelled, no run starts, and the
// claim ends.
func TestCancelDuringPlanGateWins(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	publishSkippedOccurrence(t, p, 1)
	proxy, held := heldCollection(t, coll, false)
	gate := proxy.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name(), "plan.skip_next"))
	ev := mschedulertest.NewEvents()
	runs := &ranLog{}
	startConsumer(t, held, runs.handler(), fastConfig("w1", ev))
	waitHeld(t, gate, "the plan gate's give-back")
	if err := p.Cancel(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	ev.WaitFor(t, "the claim to end", func([]mscheduler.Event) bool {
		st := readTask(t, coll, "k")
		return st.Running == 0 && len(st.Holders) == 0
	})
	if st := readTask(t, coll, "k"); st.Status != "cancelled" {
		t.Fatalf("status %q after a cancel during the plan gate, want cancelled", st.Status)
	}
	if got := runs.all(); len(got) != 0 {
		t.Fatalf("%d runs started after the cancel: %+v", len(got), got)
	}
}

// TestSkippedOccurrenceRunsOnNoWorker: a plan of concurrency 2 whose due
// occurrence is to be skipped. While the first worker to claim it is
// between its claim and its gate's write, a second worker looks for work
// again and again. The occurrence runs on neither, and the plan moves on
// by exactly the skipped time.
func TestSkippedOccurrenceRunsOnNoWorker(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	publishSkippedOccurrence(t, p, 2)
	before, _ := readPlan(t, coll, "k")
	proxy1, held1 := heldCollection(t, coll, false)
	gate := proxy1.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name(), "plan.skip_next"))
	ev := mschedulertest.NewEvents()
	runs := &ranLog{}
	startConsumer(t, held1, runs.handler(), fastConfig("w1", ev))
	waitHeld(t, gate, "the first worker's plan gate")

	proxy2, held2 := heldCollection(t, coll, false)
	from := proxy2.Seq()
	startConsumer(t, held2, runs.handler(), fastConfig("w2", ev))
	looks := func() int {
		n := 0
		for _, c := range proxy2.Since(from) {
			if c.Collection == coll.Name() && (c.Name == "find" || c.Name == "findAndModify" || c.Name == "update") {
				n++
			}
		}
		return n
	}
	ev.WaitFor(t, "the second worker to look for work three times", func([]mscheduler.Event) bool { return looks() >= 3 })
	gate.Release()
	ev.WaitFor(t, "the plan to move on", func([]mscheduler.Event) bool {
		pl, _ := readPlan(t, coll, "k")
		return pl.Planned.After(before.Planned) && readTask(t, coll, "k").Running == 0
	})
	after, _ := readPlan(t, coll, "k")
	if got := runs.all(); len(got) != 0 {
		t.Fatalf("the skipped occurrence ran %d times: %+v", len(got), got)
	}
	if after.Skipped != 1 || after.SkipNext != 0 || after.Planned.Sub(before.Planned) != time.Hour {
		t.Fatalf("plan before %+v, after %+v: want the one occurrence skipped", before, after)
	}
}

// TestClaimedLeaseExpiryIsTheTasksOwn: a worker that ran a task of a 30 s
// worker timeout claims, alone, a task of 3 s. Before the run's first
// ping, next_expiry is already within the new task's own timeout, so that
// a sweep looks at the run as soon as its lease may lapse.
func TestClaimedLeaseExpiryIsTheTasksOwn(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	proxy, held := heldCollection(t, coll, false)
	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Key == "short" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return 0, nil
	}
	startConsumer(t, held, handler, fastConfig("w1", ev))
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "long", WorkerTimeout: 30 * time.Second, PingInterval: 10 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "long", "succeeded")
	pings := proxy.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name(), "holders.w1.lease_until"))
	defer pings.Release()
	defer close(release)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "short", WorkerTimeout: 3 * time.Second, PingInterval: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, pings, "the short task's first ping")
	var doc struct {
		NextExpiry time.Time `bson:"next_expiry"`
		Holders    map[string]struct {
			Started time.Time `bson:"started"`
		} `bson:"holders"`
	}
	if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "short"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	started := doc.Holders["w1"].Started
	if started.IsZero() || doc.NextExpiry.After(started.Add(3*time.Second)) {
		t.Fatalf("run started at %s, next_expiry %s: later than the task's 3 s worker timeout", started, doc.NextExpiry)
	}
}

// TestClaimAsReadRunsNoStaleParams: a batch claim of a concurrency-1 task
// is fenced on the task as its candidate read saw it. A params update that
// lands between that read and the claim's write, within the same
// millisecond as the publish, keeps the claim from running the old params.
func TestClaimAsReadRunsNoStaleParams(t *testing.T) {
	coll := mschedulertest.Collection(t)
	frozen := time.Now().Truncate(time.Millisecond)
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{Clock: func() time.Time { return frozen }, Monotonic: func() time.Duration { return time.Hour }})
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Params: 1, RunAt: frozen}, nil); err != nil {
		t.Fatal(err)
	}
	proxy, held := heldCollection(t, coll, false)
	claim := proxy.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name(), "holders.w1"))
	ev := mschedulertest.NewEvents()
	var mu sync.Mutex
	var seen []int
	handler := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		seen = append(seen, task.Params)
		mu.Unlock()
		return 0, nil
	}
	startConsumer(t, held, handler, fastConfig("w1", ev))
	waitHeld(t, claim, "the batch claim's write")
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Params: 2, RunAt: frozen}, &mscheduler.PublishOpts{UpdateParams: true}); err != nil {
		t.Fatal(err)
	}
	claim.Release()
	waitStatus(t, ev, coll, "k", "succeeded")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != 2 {
		t.Fatalf("the handler ran with params %v, want [2]: the update landed before the claim", seen)
	}
}

// TestClaimAsReadThatMissesLooksAgain: a batch claim is fenced on its
// task as read; the task's params are edited by hand between that read and
// the claim's write, so the write misses a task that is still claimable.
// The pass reads the candidates again and claims it, rather than leave it
// to the next poll (an hour away here).
func TestClaimAsReadThatMissesLooksAgain(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Params: 1}, nil); err != nil {
		t.Fatal(err)
	}
	proxy, held := heldCollection(t, coll, false)
	claim := proxy.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name(), "holders.w1"))
	ev := mschedulertest.NewEvents()
	got := make(chan int, 2)
	cfg := fastConfig("w1", ev)
	cfg.PollInterval = time.Hour
	startConsumer(t, held, func(_ context.Context, task *mscheduler.Task[int]) (int, error) {
		got <- task.Params
		return 0, nil
	}, cfg)
	waitHeld(t, claim, "the batch claim's write")
	editTask(t, coll, "k", bson.D{{Key: "$set", Value: bson.D{{Key: "params", Value: 2}}}})
	claim.Release()
	select {
	case params := <-got:
		if params != 2 {
			t.Fatalf("the handler ran with params %d, want 2", params)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the task whose claim missed was not claimed again before the next poll")
	}
}
