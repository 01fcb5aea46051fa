package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// claimLog records, for one consumer's client, the claim commands it sends
// in order: candidate queries, claims by findAndModify, batch claims (with
// the keys of their statements) and announces.
type claimLog struct {
	coll    *mongo.Collection // the consumer's collection, on the test's client
	mu      sync.Mutex
	entries []claimEntry
	changed chan struct{} // signalled on each entry
}

type claimEntry struct {
	kind string // "candidates", "findAndModify", "batch", "announce", "look" or "next due"
	at   time.Time
	keys []string // a batch's
}

func newClaimLog() *claimLog { return &claimLog{changed: make(chan struct{}, 1)} }

func (l *claimLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		entry := claimEntry{at: time.Now()}
		id, _ := e.Command.Lookup("query", "_id").StringValueOK()
		looked, _ := e.Command.Lookup("filter", "_id").StringValueOK()
		switch {
		case e.CommandName == "find" && e.Command.Lookup("sort", "priority").Type != 0 && e.Command.Lookup("filter", "free").Type != 0:
			if limit, _ := e.Command.Lookup("limit").AsInt64OK(); limit == 1 {
				return // the first claim's look at a task's timeout
			}
			entry.kind = "candidates"
		case e.CommandName == "find" && e.Command.Lookup("sort", "priority").Type == 0 && e.Command.Lookup("sort", "run_at").Type != 0:
			entry.kind = "next due" // the look for the next task due, once nothing is claimable
		case e.CommandName == "findAndModify" && e.Command.Lookup("update", "$inc", "running").Type != 0:
			entry.kind = "findAndModify"
		case e.CommandName == "findAndModify" && id == "consumers":
			entry.kind = "announce"
		case e.CommandName == "find" && looked == "consumers":
			entry.kind = "look"
		case e.CommandName == "update":
			statements, _ := e.Command.Lookup("updates").Array().Values()
			for _, st := range statements {
				q := st.Document().Lookup("q")
				if q.Document().Lookup("done_by").Type == 0 {
					return // not a claim
				}
				entry.keys = append(entry.keys, q.Document().Lookup("_id").StringValue())
			}
			entry.kind = "batch"
		default:
			return
		}
		l.mu.Lock()
		l.entries = append(l.entries, entry)
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}}
}

func (l *claimLog) snapshot() []claimEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// count counts the entries of the kinds given.
func (l *claimLog) count(kinds ...string) int {
	n := 0
	for _, e := range l.snapshot() {
		if slices.Contains(kinds, e.kind) {
			n++
		}
	}
	return n
}

// waitCount waits until count(kinds...) reaches n.
func (l *claimLog) waitCount(t *testing.T, n int, kinds ...string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for l.count(kinds...) < n {
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %d commands of %v; got %d (%v)", n, kinds, l.count(kinds...), l.snapshot())
		}
	}
}

// loggedConsumer publishes tasks on a fresh collection, then starts a
// consumer "w" configured by edit, on a client of its own whose claim
// commands it logs.
func loggedConsumer(t *testing.T, tasks []mscheduler.Task[int], h mscheduler.Handler[int, int], edit func(*mscheduler.ConsumerConfig)) (*claimLog, *mschedulertest.Events) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	log := newClaimLog()
	log.coll = coll
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(log.monitor()))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	edit(cfg)
	startConsumer(t, dbCollection(client, coll), h, cfg)
	return log, ev
}

// numbered returns n tasks keyed k00, k01, ...
func numbered(n int) []mscheduler.Task[int] {
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i)}
	}
	return tasks
}

// noop is a handler that succeeds at once.
func noop(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }

// gate holds handlers until released, one run at a time.
type gate chan struct{}

func (g gate) handler(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
	select {
	case <-g:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// withGonePeer starts a consumer "a-worker" of 8 slots beside a peer that
// never claims (gone, but not lapsed yet): the consumer is rank 0 of 2. It
// publishes nOwn tasks of the consumer's share, then nOthers of the
// peer's, in claim order.
func withGonePeer(t *testing.T, nOwn, nOthers int) (log *claimLog, ev *mschedulertest.Events, own, others []string) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	peer := bson.D{{Key: "_id", Value: "consumers"}, {Key: "seen", Value: bson.D{{Key: "z-gone", Value: time.Now()}}}}
	if _, err := coll.Database().Collection(coll.Name()+".meta").InsertOne(ctxT(t), peer); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(own) < nOwn || len(others) < nOthers; i++ {
		key := fmt.Sprintf("k%03d", i)
		switch {
		case mscheduler.ShareOf(key, 2) == 0 && len(own) < nOwn:
			own = append(own, key)
		case mscheduler.ShareOf(key, 2) == 1 && len(others) < nOthers:
			others = append(others, key)
		}
	}
	base := time.Now().Add(-time.Hour)
	var tasks []mscheduler.Task[int]
	for i, key := range slices.Concat(own, others) {
		tasks = append(tasks, mscheduler.Task[int]{Key: key, RunAt: base.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	log = newClaimLog()
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(log.monitor()))
	ev = mschedulertest.NewEvents()
	cfg := fastConfig("a-worker", ev)
	cfg.Capacity, cfg.PollInterval = 8, time.Minute
	startConsumer(t, dbCollection(client, coll), noop, cfg)
	return log, ev, own, others
}

// TestFewTasksAreTakenAtOnce: with fewer tasks claimable than consumers
// alive there is little to collide on, and a task of another share is
// taken at once, not left to its consumer for a moment: the latency of a
// task at a time stays what it was.
func TestFewTasksAreTakenAtOnce(t *testing.T) {
	log, ev, _, others := withGonePeer(t, 0, 1)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	entries := log.snapshot()
	reads := 0
	for _, e := range entries {
		switch {
		case e.kind == "candidates":
			reads++
		case e.kind == "batch" && slices.Contains(e.keys, others[0]):
			if reads != 1 {
				t.Errorf("the peer's task was claimed after %d reads, want the first: %v", reads, entries)
			}
			return
		}
	}
	t.Fatalf("the peer's task was not claimed by a batch: %v", entries)
}

// TestOtherSharesWaitToBePassedOver: a consumer whose peer never claims
// (it is gone, but not lapsed yet) claims its own share of the tasks
// first and leaves the peer's share for a moment, then claims that too,
// with no poll to bring it back (the poll is a minute). Taken at once, the
// peer's tasks would be claimed twice over whenever the peer is alive.
func TestOtherSharesWaitToBePassedOver(t *testing.T) {
	log, ev, own, others := withGonePeer(t, 4, 4)
	ev.WaitCount(t, mscheduler.EventSucceeded, len(own)+len(others))

	// The first claim knows of no backlog (a findAndModify, whatever the
	// shares); the first batch then takes what is left of its own share.
	var firstRead time.Time
	var batches []claimEntry
	entries := log.snapshot()
	for _, e := range entries {
		switch {
		case e.kind == "candidates" && firstRead.IsZero():
			firstRead = e.at
		case e.kind == "batch":
			batches = append(batches, e)
		}
	}
	if len(batches) == 0 {
		t.Fatal("no batch claim")
	}
	for _, key := range batches[0].keys {
		if !slices.Contains(own, key) {
			t.Errorf("the first batch claimed %s of the peer's share, at once (batch %v; own share %v)", key, batches[0].keys, own)
		}
	}
	if len(batches) < 2 {
		t.Fatalf("%d batch claims, want the own share's and, later, the peer's", len(batches))
	}
	for _, b := range batches[1:] {
		for _, key := range b.keys {
			if slices.Contains(others, key) && b.at.Sub(firstRead) < mscheduler.PassOverMin {
				t.Errorf("%s of the peer's share was claimed %v after it was first read, before %v", key, b.at.Sub(firstRead), mscheduler.PassOverMin)
			}
		}
	}
	// While it leaves them, the runs of its own share end and free their
	// slots, which set off no read: one read when the wait is over.
	first := slices.IndexFunc(entries, func(e claimEntry) bool { return e.kind == "batch" })
	helped := slices.IndexFunc(entries, func(e claimEntry) bool {
		return e.kind == "batch" && slices.ContainsFunc(e.keys, func(k string) bool { return slices.Contains(others, k) })
	})
	if helped < 0 {
		t.Fatalf("no batch claimed the peer's tasks: %v", entries)
	}
	reads := 0
	for _, e := range entries[first:helped] {
		if e.kind == "candidates" {
			reads++
		}
	}
	if reads != 1 {
		t.Errorf("%d reads of candidates while the peer's tasks were left, want 1 when the wait was over: %v", reads, entries[first:helped])
	}
}

// TestLostTasksBringTheAnnounceForward: a claim that loses tasks (here,
// spares paused since they were read) announces the consumer again before
// it reads candidates afresh, so that a view of the consumers alive gone
// stale (one joined, and the shares moved) is renewed at once, not a
// maintenance interval later.
func TestLostTasksBringTheAnnounceForward(t *testing.T) {
	g := make(gate)
	log, ev := loggedConsumer(t, numbered(20), g.handler, func(c *mscheduler.ConsumerConfig) {
		c.Capacity, c.PollInterval, c.ClaimSpareFor = 4, time.Minute, time.Minute
	})
	t.Cleanup(func() { close(g) })              // before the consumer stops
	ev.WaitCount(t, mscheduler.EventClaimed, 4) // and the other 16 kept as spares

	if _, err := log.coll.UpdateMany(ctxT(t), bson.D{{Key: "status", Value: mscheduler.StatusPending}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "paused", Value: true}}}}); err != nil {
		t.Fatal(err)
	}
	// Announces are brought forward at most once per ReannounceGap from
	// the last one: the first claim brought the second forward.
	log.waitCount(t, 2, "announce")
	var last time.Time
	for _, e := range log.snapshot() {
		if e.kind == "announce" {
			last = e.at
		}
	}
	<-time.After(time.Until(last.Add(mscheduler.ReannounceGap)))
	before, reads, announces := len(log.snapshot()), log.count("candidates"), log.count("announce")
	g <- struct{}{}                         // a slot frees; the claim from spares misses
	log.waitCount(t, reads+1, "candidates") // the claim that missed reads afresh

	log.waitCount(t, announces+1, "announce")

	after := log.snapshot()[before:]
	missed := slices.IndexFunc(after, func(e claimEntry) bool { return e.kind == "batch" })
	if missed < 0 {
		t.Fatalf("no claim from spares: %v", after)
	}
	announced := slices.IndexFunc(after, func(e claimEntry) bool { return e.kind == "announce" })
	if announced < missed {
		t.Errorf("no announce after the claim that lost its tasks: %v", after)
	}
	if gap := after[announced].at.Sub(after[missed].at); gap > time.Second {
		t.Errorf("the announce came %v after the claim that lost its tasks, want at once", gap)
	}
}

// TestFirstClaimAnnouncesAgain: consumers started together announce
// themselves one after the other, the first knowing of few of the
// others; the first claim that finds work waiting therefore brings the
// second announce forward to ReannounceGap after the first, not
// AnnounceSoon, so that their shares soon agree.
func TestFirstClaimAnnouncesAgain(t *testing.T) {
	log, ev := loggedConsumer(t, numbered(8), noop, func(c *mscheduler.ConsumerConfig) {
		c.Capacity, c.PollInterval = 8, time.Minute
	})
	ev.WaitCount(t, mscheduler.EventSucceeded, 8)
	log.waitCount(t, 2, "announce")
	var announces []time.Time
	for _, e := range log.snapshot() {
		if e.kind == "announce" {
			announces = append(announces, e.at)
		}
	}
	// AnnounceSoon is jittered by 20% at most: a gap below 70% of it was
	// brought forward.
	if gap := announces[1].Sub(announces[0]); gap < mscheduler.ReannounceGap*9/10 || gap > mscheduler.AnnounceSoon*7/10 {
		t.Errorf("the second announce came %v after the first, want from %v to %v", gap, mscheduler.ReannounceGap*9/10, mscheduler.AnnounceSoon*7/10)
	}
}

// TestFirstWorkLooksAtThePeersAgain: consumers started together announce
// themselves one after the other, each knowing only of those before it.
// The first batch read that finds work therefore looks at the consumers
// alive again before it chooses: here two peers (that never claim)
// announce after w1 did, and w1's first batch takes only its share among
// three, where by its announce it was alone and would take any.
func TestFirstWorkLooksAtThePeersAgain(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	log := newClaimLog()
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(log.monitor()))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w1", ev)
	cfg.Capacity, cfg.PollInterval = 8, time.Minute
	g := make(gate)
	c := startConsumer(t, dbCollection(client, coll), g.handler, cfg)
	t.Cleanup(func() { close(g) }) // before the consumer stops
	log.waitCount(t, 1, "announce")

	// Within ReannounceGap of w1's announce, so that no announce of w1's
	// learns of them before its first batch.
	peers := bson.D{{Key: "$set", Value: bson.D{{Key: "seen.w0", Value: time.Now()}, {Key: "seen.w2", Value: time.Now()}}}}
	if _, err := coll.Database().Collection(coll.Name()+".meta").UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "consumers"}}, peers); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishMany(ctxT(t), numbered(30), nil); err != nil {
		t.Fatal(err)
	}
	c.Wake()
	ev.WaitCount(t, mscheduler.EventClaimed, cfg.Capacity)

	// w1's share among three holds 10 of the 30 tasks, more than its slots:
	// choosing by the look, it claims no task of another share (those wait
	// to be passed over, and are not needed).
	entries := log.snapshot()
	first := slices.IndexFunc(entries, func(e claimEntry) bool { return e.kind == "batch" })
	if first < 0 {
		t.Fatalf("no batch claim: %v", entries)
	}
	if looks := slices.IndexFunc(entries[:first], func(e claimEntry) bool { return e.kind == "look" }); looks < 0 {
		t.Errorf("no look at the consumers alive before the first batch: %v", entries[:first])
	}
	if announces := slices.DeleteFunc(slices.Clone(entries), func(e claimEntry) bool { return e.kind != "announce" }); len(announces) != 1 {
		t.Fatalf("%d announces by the last claim, want 1: the test ran too slowly to tell a look from an announce", len(announces))
	}
	var claimed []string
	for _, e := range entries {
		claimed = append(claimed, e.keys...)
	}
	if len(claimed) != cfg.Capacity {
		t.Fatalf("batches claimed %v, want all %d runs claimed by batches", claimed, cfg.Capacity)
	}
	for _, key := range claimed {
		if share := mscheduler.ShareOf(key, 3); share != 1 {
			t.Errorf("w1 claimed %s, of share %d among 3, not its own (1): it chose as if alone (claimed %v)", key, share, claimed)
		}
	}
}

// TestRunEndsThatFreeWorkWake: a run that ends after the claim pass that
// started it found nothing more sets off a claim at once (the poll and
// the sweep are a minute here), which finds what its end left claimable:
// a failed run's task, tried again after its backoff, and the other slot
// of a task of two runs, which this worker could not claim while it held
// the first.
func TestRunEndsThatFreeWorkWake(t *testing.T) {
	for name, c := range map[string]struct {
		task     mscheduler.Task[int]
		failures int32 // the first runs fail
	}{
		"failed run":       {task: mscheduler.Task[int]{Key: "f", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 3, RetryDelay: time.Millisecond}, failures: 1},
		"task of two runs": {task: mscheduler.Task[int]{Key: "two", Concurrency: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			var runs atomic.Int32
			first := make(gate)
			h := func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
				n := runs.Add(1)
				if n == 1 {
					if _, err := first.handler(ctx, task); err != nil {
						return 0, err
					}
				}
				if n <= c.failures {
					return 0, errors.New("failing on purpose")
				}
				return 0, nil
			}
			log, ev := loggedConsumer(t, []mscheduler.Task[int]{c.task}, h, func(c *mscheduler.ConsumerConfig) {
				c.Capacity, c.PollInterval, c.SweepInterval = 2, time.Minute, time.Minute
			})
			t.Cleanup(func() { close(first) })
			// The pass that claimed the first run (a batch) looks for more
			// with a findAndModify, which finds none (the task is held, or
			// running). The pass may not have ended when the run ends: a
			// run end that did not wake the loop would leave the work
			// for the poll, a minute away, all the same.
			log.waitCount(t, 1, "findAndModify")
			first <- struct{}{}
			ev.WaitCountWithin(t, 10*time.Second, mscheduler.EventSucceeded, max(c.task.Concurrency, 1))
		})
	}
}
