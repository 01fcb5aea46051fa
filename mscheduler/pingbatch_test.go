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
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// pingCommands counts the commands that renew leases: lone pings (a
// findAndModify fenced on a holder's run), batched pings (an update whose
// statements set a holder's lease) and their reads back.
type pingCommands struct {
	mu                   sync.Mutex
	lone, batched, reads int
	statements           int // in batched pings
}

func (c *pingCommands) started(_ context.Context, e *event.CommandStartedEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.CommandName {
	case "findAndModify":
		if q, ok := e.Command.Lookup("query").DocumentOK(); ok && hasHolderRun(q) {
			if _, err := e.Command.LookupErr("update", "$set"); err == nil && !hasHolderStart(e.Command) {
				c.lone++
			}
		}
	case "update":
		updates, _ := e.Command.Lookup("updates").Array().Values()
		if len(updates) > 1 && hasHolderRun(updates[0].Document().Lookup("q").Document()) {
			c.batched++
			c.statements += len(updates)
		}
	case "find":
		if proj, ok := e.Command.Lookup("projection").DocumentOK(); ok && proj.Lookup("worker_timeout_ms").Type != 0 && proj.Lookup("ping_interval_ms").Type != 0 {
			c.reads++
		}
	}
}

func (c *pingCommands) snapshot() pingCommands {
	c.mu.Lock()
	defer c.mu.Unlock()
	return pingCommands{lone: c.lone, batched: c.batched, reads: c.reads, statements: c.statements}
}

// hasHolderRun reports a filter fenced on a holder's run.
func hasHolderRun(filter bson.Raw) bool {
	elems, _ := filter.Elements()
	for _, e := range elems {
		if strings.HasPrefix(e.Key(), "holders.") {
			return true
		}
	}
	return false
}

// hasHolderStart reports an update that adds a holder (a claim, not a ping).
func hasHolderStart(cmd bson.Raw) bool {
	set, _ := cmd.Lookup("update", "$set").DocumentOK()
	elems, _ := set.Elements()
	for _, e := range elems {
		if strings.HasSuffix(e.Key(), ".started") {
			return true
		}
	}
	return false
}

// heldTasks publishes n tasks with short pings and starts a consumer that
// holds them all, its handlers waiting for their context to end or the
// test's; it returns the collection, the events, the ping commands counted
// and each handler's cause of cancellation.
func heldTasks(t *testing.T, n int, batchMax int) (*mongo.Collection, *mschedulertest.Events, *pingCommands, map[string]chan error) {
	return heldTasksDelayed(t, n, batchMax, 0)
}

// heldTasksDelayed is heldTasks with every command of the consumer held
// delay on its way to the server (none when 0).
func heldTasksDelayed(t *testing.T, n int, batchMax int, delay time.Duration) (*mongo.Collection, *mschedulertest.Events, *pingCommands, map[string]chan error) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	causes := map[string]chan error{}
	for i := range tasks {
		key := fmt.Sprintf("k%d", i)
		tasks[i] = mscheduler.Task[int]{Key: key, PingInterval: 100 * time.Millisecond, WorkerTimeout: 2 * time.Second}
		causes[key] = make(chan error, 1)
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	counts := &pingCommands{}
	opts := options.Client().SetMonitor(&event.CommandMonitor{Started: counts.started})
	if delay > 0 {
		proxy, err := mschedulertest.StartDelayProxy(singleHost(t), mschedulertest.FixedDelay(delay))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxy.Close)
		opts.ApplyURI(proxy.URI())
	}
	client := mschedulertest.NewClient(t, opts)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.PingBatchMax = n, batchMax
	release := make(chan struct{})
	startConsumer(t, dbCollection(client, coll), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		select {
		case <-ctx.Done():
			causes[task.Key] <- context.Cause(ctx)
			return 0, context.Cause(ctx)
		case <-release:
			return 0, nil
		}
	}, cfg)
	t.Cleanup(func() { close(release) }) // before the consumer stops: Stop waits for handlers
	ev.WaitCount(t, mscheduler.EventClaimed, n)
	return coll, ev, counts, causes
}

// TestBatchedPingsRenewEveryRun: a worker holding 8 runs renews them all,
// with fewer than half a command per renewal once their pings fall in
// step; pinged alone, each renewal is a command. The same holds on a
// server slower to answer than the pings' interval (100 ms, every
// command held 200 ms): pings then went alone, a command each, the runs
// taken for behind on their renewals.
func TestBatchedPingsRenewEveryRun(t *testing.T) {
	const runs, rounds = 8, 10
	for _, c := range []struct {
		batchMax      int
		delay         time.Duration
		most, fewest  float64 // commands per renewal
		wantBatched   bool
		wantLoneAbove int
	}{
		{batchMax: mscheduler.PingBatchMaxDefault, most: 0.5, wantBatched: true},
		{batchMax: mscheduler.PingBatchMaxDefault, delay: 200 * time.Millisecond, most: 0.5, wantBatched: true},
		{batchMax: 1, fewest: 1, wantLoneAbove: runs * rounds},
	} {
		t.Run(fmt.Sprintf("PingBatchMax=%d,delay=%s", c.batchMax, c.delay), func(t *testing.T) {
			_, ev, counts, _ := heldTasksDelayed(t, runs, c.batchMax, c.delay)
			// The first pings come as the runs were claimed; then they fall in step.
			ev.WaitCount(t, mscheduler.EventRenewed, 2*runs)
			before, renewedBefore := counts.snapshot(), ev.Count(mscheduler.EventRenewed)
			ev.WaitCount(t, mscheduler.EventRenewed, renewedBefore+runs*rounds)
			after, renewed := counts.snapshot(), ev.Count(mscheduler.EventRenewed)-renewedBefore
			sent := (after.lone - before.lone) + (after.batched - before.batched) + (after.reads - before.reads)
			perRenewal := float64(sent) / float64(renewed)
			t.Logf("%d renewals with %d commands (%d lone pings, %d batched with %d statements, %d reads back): %.2f per renewal",
				renewed, sent, after.lone-before.lone, after.batched-before.batched, after.statements-before.statements, after.reads-before.reads, perRenewal)
			if c.most > 0 && perRenewal > c.most {
				t.Errorf("%.2f commands per renewal, want at most %.2f", perRenewal, c.most)
			}
			// The commands are counted as they start, the renewals as their
			// replies come: pings in flight when the window opened (at most
			// one a run) are renewals of the window whose commands are not.
			if inFlight := float64(runs); c.fewest > 0 && (float64(sent)+inFlight)/float64(renewed) < c.fewest {
				t.Errorf("%.2f commands per renewal (%d in flight at most at the start), want at least %.2f", perRenewal, runs, c.fewest)
			}
			if c.wantBatched != (after.batched > before.batched) {
				t.Errorf("batched pings sent: %d, want some: %v", after.batched-before.batched, c.wantBatched)
			}
			if after.lone-before.lone+runs < c.wantLoneAbove {
				t.Errorf("%d lone pings, want at least %d", after.lone-before.lone, c.wantLoneAbove)
			}
			for _, e := range ev.Snapshot() {
				if e.Kind == mscheduler.EventLeaseLost || e.Kind == mscheduler.EventError {
					t.Errorf("event %v: %v", e.Kind, e.Err)
				}
			}
		})
	}
}

// TestBatchedPingMissCancelsOnlyThatRun: one run of a batch is taken away
// (its holder entry now names another run); the batched ping that misses
// it cancels that run's handler as a lost lease, and only that one: the
// other runs go on being renewed.
func TestBatchedPingMissCancelsOnlyThatRun(t *testing.T) {
	coll, ev, counts, causes := heldTasks(t, 3, mscheduler.PingBatchMaxDefault)
	ev.WaitCount(t, mscheduler.EventRenewed, 6)
	batchedBefore := counts.snapshot().batched
	editTask(t, coll, "k1", bson.D{{Key: "$set", Value: bson.D{{Key: "holders.w.run", Value: "another-run"}}}})
	select {
	case cause := <-causes["k1"]:
		if !errors.Is(cause, mscheduler.ErrLeaseLost) {
			t.Fatalf("k1's handler ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(waitTimeout):
		t.Fatal("k1's handler was not cancelled after its run was taken away")
	}
	renewed := ev.Count(mscheduler.EventRenewed)
	ev.WaitCount(t, mscheduler.EventRenewed, renewed+10)
	for _, key := range []string{"k0", "k2"} {
		select {
		case cause := <-causes[key]:
			t.Errorf("%s's handler was cancelled too: %v", key, cause)
		default:
		}
	}
	if counts.snapshot().batched == batchedBefore {
		t.Error("no batched ping was sent after the edit: the test did not check a batch")
	}
}

// TestBatchedPingWrongFormIsRenewedAlone: a run's statement in a batch
// guesses that it is its task's only holder, but a second holder came
// (added by hand here): the statement misses, the read back shows the run
// still held, and the run is pinged alone in the other form, not lost.
func TestBatchedPingWrongFormIsRenewedAlone(t *testing.T) {
	coll, ev, counts, causes := heldTasks(t, 3, mscheduler.PingBatchMaxDefault)
	ev.WaitCount(t, mscheduler.EventRenewed, 6)
	lone := counts.snapshot().lone
	ghost := bson.D{{Key: "run", Value: "ghost-run"}, {Key: "started", Value: time.Now()}, {Key: "lease_until", Value: time.Now().Add(time.Hour)}}
	editTask(t, coll, "k1", bson.D{{Key: "$set", Value: bson.D{{Key: "holders.ghost", Value: ghost}}}, {Key: "$inc", Value: bson.D{{Key: "running", Value: 1}}}})
	renewed := ev.Count(mscheduler.EventRenewed)
	ev.WaitCount(t, mscheduler.EventRenewed, renewed+15)
	if counts.snapshot().lone == lone {
		t.Error("no run was pinged alone after its batched statement missed")
	}
	for key, ch := range causes {
		select {
		case cause := <-ch:
			t.Errorf("%s's handler was cancelled: %v", key, cause)
		default:
		}
	}
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventLeaseLost {
			t.Errorf("lease lost: %+v", e)
		}
	}
}

// TestRunThatMissedARenewalIsPingedAlone: the replies to a batched ping
// and to the driver's retry of it are lost (the connection drops after the
// server applied it), so no run of the batch knows it was renewed. Each is then pinged alone, so that one
// run short of lease never cuts short the pings of others, and no lease
// is lost.
func TestRunThatMissedARenewalIsPingedAlone(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	var tasks []mscheduler.Task[int]
	for i := range 3 {
		tasks = append(tasks, mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), PingInterval: 100 * time.Millisecond, WorkerTimeout: 2 * time.Second})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	armed, drops, loneAfter := false, 0, 0
	_, client := newCmdProxy(t, func(name string, body bson.Raw) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !armed:
		case name == "update" && drops < 2:
			// While the handlers wait, the only updates are batched pings
			// (their statements travel beside the body): drop the replies to
			// one and to the driver's retry of it.
			drops++
			return true
		case name == "findAndModify" && drops == 2:
			if q, ok := body.Lookup("query").DocumentOK(); ok && hasHolderRun(q) {
				loneAfter++
			}
		}
		return false
	})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 3
	release := make(chan struct{})
	startConsumer(t, dbCollection(client, coll), holdUntil(release), cfg)
	t.Cleanup(func() { close(release) })
	ev.WaitCount(t, mscheduler.EventClaimed, 3)
	ev.WaitCount(t, mscheduler.EventRenewed, 6)
	mu.Lock()
	armed = true
	mu.Unlock()
	ev.WaitFor(t, "a ping error from the dropped reply", func(evs []mscheduler.Event) bool {
		return mschedulertest.Summarize(evs)[mscheduler.EventError] > 0
	})
	renewed := ev.Count(mscheduler.EventRenewed)
	ev.WaitCount(t, mscheduler.EventRenewed, renewed+9)
	mu.Lock()
	defer mu.Unlock()
	if loneAfter == 0 {
		t.Error("after the lost reply, no run was pinged alone")
	}
	if n := ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Errorf("%d leases lost", n)
	}
}

// TestAPingReadBackNeverLowersALease: a batch of pings is renewed as soon
// as its update matched every run, so the next batch may land before the
// first one's read back. That read then finds later leases than it asked
// for; taking them for a wrong guess of the holders and pinging each run
// alone again wrote the older leases back over the newer ones, so that the
// server held a shorter lease than the worker counted on, and swept a run
// its worker was still pinging. No lease the worker writes for a run may
// be earlier than one it wrote before.
func TestAPingReadBackNeverLowersALease(t *testing.T) {
	const runs = 3
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], runs)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), PingInterval: 100 * time.Millisecond, WorkerTimeout: 3 * time.Second}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	proxy, held := heldCollection(t, coll, false)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = runs
	release := make(chan struct{})
	startConsumer(t, held, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-release:
			return 0, nil
		}
	}, cfg)
	t.Cleanup(func() { close(release) })
	ev.WaitCount(t, mscheduler.EventClaimed, runs)
	ev.WaitCount(t, mscheduler.EventRenewed, 2*runs)

	readBack := proxy.Hold(mschedulertest.BeforeSend, func(c mschedulertest.Command) bool {
		proj, ok := c.Body.Lookup("projection").DocumentOK()
		return c.Name == "find" && c.Collection == coll.Name() && ok && proj.Lookup("worker_timeout_ms").Type != 0 && proj.Lookup("holders.w").Type != 0
	})
	waitHeld(t, readBack, "a batch's read back")
	// The held batch's runs were renewed by its update; the next batch
	// lands, and is read back, while the first read waits.
	renewed := ev.Count(mscheduler.EventRenewed)
	ev.WaitCount(t, mscheduler.EventRenewed, renewed+runs)
	readBack.Release()
	renewed = ev.Count(mscheduler.EventRenewed)
	ev.WaitCount(t, mscheduler.EventRenewed, renewed+4*runs)

	last := map[string]time.Time{}
	for _, c := range proxy.Since(0) {
		for _, w := range leaseWrites(c, "w") {
			if prev, ok := last[w.run]; ok && w.lease.Before(prev) {
				t.Errorf("command %d (%s) wrote run %s's lease %s after %s had been written", c.Seq, c.Name, w.run, w.lease.Format("15:04:05.000"), prev.Format("15:04:05.000"))
			}
			last[w.run] = w.lease
		}
	}
	if len(last) != runs {
		t.Fatalf("lease writes seen for %d runs, want %d", len(last), runs)
	}
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventLeaseLost || e.Kind == mscheduler.EventExpired {
			t.Errorf("event %v of %s: %v", e.Kind, e.Key, e.Err)
		}
	}
}

type leaseWrite struct {
	run   string
	lease time.Time
}

// leaseWrites are the renewals of worker's runs a command makes: a lone
// ping (findAndModify) or a batch's statements (update), each fenced on a
// run and setting its lease.
func leaseWrites(c mschedulertest.Command, worker string) []leaseWrite {
	runPath, leasePath := "holders."+worker+".run", "holders."+worker+".lease_until"
	one := func(q, u bson.RawValue) []leaseWrite {
		run, okRun := q.Document().Lookup(runPath).StringValueOK()
		set, okSet := u.Document().Lookup("$set").DocumentOK()
		if !okRun || !okSet {
			return nil
		}
		lease, ok := set.Lookup(leasePath).TimeOK()
		if !ok {
			return nil
		}
		return []leaseWrite{{run: run, lease: lease}}
	}
	var out []leaseWrite
	switch c.Name {
	case "findAndModify":
		if q, u := c.Body.Lookup("query"), c.Body.Lookup("update"); q.Type == bson.TypeEmbeddedDocument && u.Type == bson.TypeEmbeddedDocument {
			out = one(q, u)
		}
	case "update":
		for _, stmt := range c.Writes {
			if q, u := stmt.Lookup("q"), stmt.Lookup("u"); q.Type == bson.TypeEmbeddedDocument && u.Type == bson.TypeEmbeddedDocument {
				out = append(out, one(q, u)...)
			}
		}
	}
	return out
}
