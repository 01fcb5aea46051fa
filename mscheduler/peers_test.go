package mscheduler_test

import (
	"context"
	"fmt"
	"slices"
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

// idleLog records, for one consumer's client, when it sent each idle
// query, and how many consumers its last announce found alive.
type idleLog struct {
	mu      sync.Mutex
	claims  []time.Time
	sweeps  []time.Time
	checks  int
	peers   int
	changed chan struct{} // signalled on each record
}

func newIdleLog() *idleLog { return &idleLog{changed: make(chan struct{}, 1)} }

func (l *idleLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			l.mu.Lock()
			defer l.mu.Unlock()
			switch {
			case e.CommandName == "findAndModify" && e.Command.Lookup("query", "free").Type != 0,
				e.CommandName == "find" && e.Command.Lookup("sort", "priority").Type != 0 && e.Command.Lookup("filter", "free").Type != 0,
				e.CommandName == "aggregate" && e.Command.Lookup("pipeline", "0", "$changeStream").Type == 0:
				// A claim, alone or by a read of candidates, or the shared
				// poll of the database (each consumer has a client of its own).
				l.claims = append(l.claims, time.Now())
			case e.CommandName == "find" && e.Command.Lookup("filter", "next_expiry").Type != 0:
				l.sweeps = append(l.sweeps, time.Now())
			case e.CommandName == "find" && e.Command.Lookup("filter", "$or").Type != 0 && e.Command.Lookup("filter", "status").Type == 0:
				l.checks++
			}
			l.signal()
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if e.CommandName != "findAndModify" {
				return
			}
			seen, ok := e.Reply.Lookup("value", "seen").DocumentOK()
			if !ok {
				return
			}
			elems, _ := seen.Elements()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.peers = len(elems)
			l.signal()
		},
	}
}

func (l *idleLog) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// reset forgets what was recorded, keeping the peers count.
func (l *idleLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims, l.sweeps, l.checks = nil, nil, 0
}

// waitUntil waits for cond over what l recorded, on each record.
func (l *idleLog) waitUntil(t *testing.T, what string, cond func(l *idleLog) bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		l.mu.Lock()
		ok := cond(l)
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// medianGap is the median time between consecutive times; 0 for fewer
// than two.
func medianGap(times []time.Time) time.Duration {
	if len(times) < 2 {
		return 0
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// TestIdleConsumersShareThePollBudget: eight idle consumers of one
// collection with a PollBudget of 1 learn of each other, and each then
// polls and sweeps eight times less often than its intervals, so that
// together they cost the server what one consumer costs; only the
// maintenance lease holder looks for unclaimable documents.
func TestIdleConsumersShareThePollBudget(t *testing.T) {
	const n, budget = 8, 1
	const poll, sweep = 10 * time.Millisecond, 50 * time.Millisecond
	coll := mschedulertest.Collection(t)
	newProducer[int](t, coll, nil) // indexes
	logs := make([]*idleLog, n)
	consumers := make([]*mscheduler.Consumer[int, int], n)
	for i := range n {
		logs[i] = newIdleLog()
		client := mschedulertest.NewClient(t, options.Client().SetMonitor(logs[i].monitor()))
		cfg := fastConfig(fmt.Sprintf("w%d", i), mschedulertest.NewEvents())
		cfg.PollInterval, cfg.SweepInterval, cfg.PollBudget = poll, sweep, budget
		cfg.MaintenanceInterval, cfg.CheckInterval = time.Second, 20*time.Millisecond
		cfg.Discovery = mscheduler.DiscoveryPoll // the budget is of polls: a change stream would slow them to ChangeStreamPollInterval
		consumers[i] = startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	}
	for i, l := range logs {
		l.waitUntil(t, fmt.Sprintf("w%d to learn of %d consumers", i, n), func(l *idleLog) bool { return l.peers == n })
		l.reset()
	}
	for i, l := range logs {
		l.waitUntil(t, fmt.Sprintf("4 sweeps of w%d", i), func(l *idleLog) bool { return len(l.sweeps) >= 4 })
	}
	checkers := 0
	for i, l := range logs {
		l.mu.Lock()
		claimGap, sweepGap, checks := medianGap(l.claims), medianGap(l.sweeps), l.checks
		l.mu.Unlock()
		// Each interval is stretched n/budget times, then jittered by
		// ±20%; a slow server only makes gaps longer.
		if want := 7 * poll * n / budget / 10; claimGap < want {
			t.Errorf("w%d polled every %s (median), want at least %s", i, claimGap, want)
		}
		if want := 7 * sweep * n / budget / 10; sweepGap < want {
			t.Errorf("w%d swept every %s (median), want at least %s", i, sweepGap, want)
		}
		if checks > 0 {
			checkers++
			if !consumers[i].MaintenanceLeader() {
				t.Errorf("w%d looked for unclaimable documents %d times without holding the maintenance lease", i, checks)
			}
		}
	}
	if checkers != 1 {
		t.Errorf("%d consumers looked for unclaimable documents, want 1 (the maintenance lease holder)", checkers)
	}
}

// TestPollBudgetStillFindsWork: with a PollBudget of 1 among four
// consumers that poll rarely each, a task published from another client
// (no wake reaches them) is still claimed, by whichever polls first.
func TestPollBudgetStillFindsWork(t *testing.T) {
	const n = 4
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, mschedulertest.CollectionOf(t, mschedulertest.NewClient(t)), nil)
	ev := mschedulertest.NewEvents()
	for i := range n {
		client := mschedulertest.NewClient(t)
		cfg := fastConfig(fmt.Sprintf("w%d", i), ev)
		cfg.PollInterval, cfg.PollBudget, cfg.MaintenanceInterval = 100*time.Millisecond, 1, 200*time.Millisecond
		startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	}
	for i := range 5 {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: fmt.Sprint("k", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 5)
}

// TestConsumersDocumentEditedByHand: a consumers document whose seen is
// not a document is replaced; entries gone (an old time, a time a day
// ahead, a value that is not a time) are removed by the maintenance lease
// holder and recent ones kept; a consumer that stops removes its own
// entry.
func TestConsumersDocumentEditedByHand(t *testing.T) {
	ctx := ctxT(t)
	meta := func(coll *mongo.Collection) *mongo.Collection {
		return coll.Database().Collection(coll.Name() + ".meta")
	}
	seenOf := func(t *testing.T, coll *mongo.Collection) bson.M {
		t.Helper()
		var doc struct {
			Seen bson.M `bson:"seen"`
		}
		if err := meta(coll).FindOne(ctx, bson.D{{Key: "_id", Value: "consumers"}}).Decode(&doc); err != nil {
			t.Fatalf("read the consumers document: %v", err)
		}
		return doc.Seen
	}
	handler := func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }

	t.Run("seen is not a document", func(t *testing.T) {
		coll := mschedulertest.Collection(t)
		p := newProducer[int](t, coll, nil)
		if _, err := meta(coll).InsertOne(ctx, bson.D{{Key: "_id", Value: "consumers"}, {Key: "seen", Value: "junk"}}); err != nil {
			t.Fatal(err)
		}
		ev := mschedulertest.NewEvents()
		startConsumer(t, coll, handler, fastConfig("w", ev))
		if _, err := p.Publish(ctx, mscheduler.Task[int]{Key: "k"}, nil); err != nil {
			t.Fatal(err)
		}
		ev.WaitCount(t, mscheduler.EventSucceeded, 1)
		if seen := seenOf(t, coll); len(seen) != 1 || seen["w"] == nil {
			t.Errorf("consumers seen = %v, want only w", seen)
		}
		if n := ev.Count(mscheduler.EventError); n != 0 {
			t.Errorf("%d error events, want none: %v", n, ev.Snapshot())
		}
	})

	t.Run("gone entries", func(t *testing.T) {
		coll := mschedulertest.Collection(t)
		newProducer[int](t, coll, nil)
		now := time.Now()
		seen := bson.D{{Key: "ghost", Value: now.Add(-time.Hour)}, {Key: "odd", Value: "x"}, {Key: "ahead", Value: now.Add(24 * time.Hour)}, {Key: "fresh", Value: now}}
		if _, err := meta(coll).InsertOne(ctx, bson.D{{Key: "_id", Value: "consumers"}, {Key: "seen", Value: seen}}); err != nil {
			t.Fatal(err)
		}
		ev := mschedulertest.NewEvents()
		c := startConsumer(t, coll, handler, fastConfig("w", ev))
		want := []string{"fresh", "w"}
		waitUntil(t, waitTimeout, fmt.Sprintf("consumers seen to be %v", want), func() bool {
			got := seenOf(t, coll)
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			return slices.Equal(keys, want)
		})
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := seenOf(t, coll); got["w"] != nil {
			t.Errorf("w still in consumers seen after its stop: %v", got)
		}
	})
}

// TestConsumersOfOtherGroupsAreNotPeers: consumers count as peers only
// those serving the same groups, since only they can claim the same
// tasks: three without groups and one of group b announce themselves in
// two documents.
func TestConsumersOfOtherGroupsAreNotPeers(t *testing.T) {
	coll := mschedulertest.Collection(t)
	newProducer[int](t, coll, nil)
	handler := func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }
	for i := range 3 {
		startConsumer(t, coll, handler, fastConfig(fmt.Sprintf("w%d", i), mschedulertest.NewEvents()))
	}
	cfg := fastConfig("gb", mschedulertest.NewEvents())
	cfg.Groups = []string{"b"}
	startConsumer(t, coll, handler, cfg)
	meta := coll.Database().Collection(coll.Name() + ".meta")
	count := func(id string) int {
		var doc struct {
			Seen bson.M `bson:"seen"`
		}
		if err := meta.FindOne(ctxT(t), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			return -1
		}
		return len(doc.Seen)
	}
	waitUntil(t, waitTimeout, "three consumers in consumers and one in consumers:b", func() bool {
		return count("consumers") == 3 && count("consumers:b") == 1
	})
}

// TestJoiningConsumersDoNotAllSweepAtOnce: a consumer that joins more
// than PollBudget of them sweeps first at a random point of its
// spread-out interval, not at start, while the first consumer, alone,
// sweeps at once.
func TestJoiningConsumersDoNotAllSweepAtOnce(t *testing.T) {
	const n = 4
	coll := mschedulertest.Collection(t)
	newProducer[int](t, coll, nil) // indexes
	logs := make([]*idleLog, n)
	for i := range n {
		logs[i] = newIdleLog()
		client := mschedulertest.NewClient(t, options.Client().SetMonitor(logs[i].monitor()))
		cfg := fastConfig(fmt.Sprintf("w%d", i), mschedulertest.NewEvents())
		// Spread over hours, a first sweep within the test is unlikely
		// (a few in a million) but for the first consumer's.
		cfg.PollInterval, cfg.SweepInterval, cfg.PollBudget = 10*time.Millisecond, time.Hour, 1
		// The test waits for polls: with a change stream open they came
		// every 15 s, the test took minutes, and a first sweep spread over
		// hours fell within it one time in fifty.
		cfg.ChangeStreamPollInterval = cfg.PollInterval
		startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
		logs[i].waitUntil(t, fmt.Sprintf("w%d to learn of %d consumers", i, i+1), func(l *idleLog) bool { return l.peers >= i+1 })
		logs[i].waitUntil(t, fmt.Sprintf("3 polls of w%d", i), func(l *idleLog) bool { return len(l.claims) >= 3 })
	}
	// Alone at start, w0 sweeps at once: within the test, not an hour on.
	logs[0].waitUntil(t, "w0's first sweep", func(l *idleLog) bool { return len(l.sweeps) > 0 })
	for i, l := range logs[1:] {
		l.mu.Lock()
		sweeps := len(l.sweeps)
		l.mu.Unlock()
		if sweeps > 0 {
			t.Errorf("w%d, joining %d consumers with a budget of 1, swept %d times at start", i+1, i+1, sweeps)
		}
	}
}

// TestSweepsSpreadByThePeersAliveNow: a consumer's next sweep is spread by
// the consumers alive when it comes due, not when the last sweep ran. w0,
// alone at start, sweeps at once and then about every SweepInterval; once
// it learns of nine more consumers (PollBudget 1), its next sweep moves
// out to about ten intervals after its last, where it came one interval
// after it when the last sweep's view set it.
func TestSweepsSpreadByThePeersAliveNow(t *testing.T) {
	coll := mschedulertest.Collection(t)
	newProducer[int](t, coll, nil) // indexes
	l := newIdleLog()
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(l.monitor()))
	cfg := fastConfig("w0", mschedulertest.NewEvents())
	cfg.PollInterval, cfg.SweepInterval, cfg.PollBudget, cfg.MaintenanceInterval = time.Minute, time.Second, 1, 2*time.Second
	startConsumer(t, dbCollection(client, coll), noop, cfg)
	l.waitUntil(t, "w0's first sweep", func(l *idleLog) bool { return len(l.sweeps) > 0 })

	// Nine peers that never claim, seen again and again so that they stay
	// alive; w0 learns of them at its next announce.
	meta := coll.Database().Collection(coll.Name() + ".meta")
	seePeers := func() {
		var seen bson.D
		for i := 1; i <= 9; i++ {
			seen = append(seen, bson.E{Key: fmt.Sprintf("seen.p%d", i), Value: time.Now()})
		}
		if _, err := meta.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "consumers"}}, bson.D{{Key: "$set", Value: seen}}); err != nil {
			t.Error(err)
		}
	}
	seePeers()
	l.waitUntil(t, "w0 to learn of 10 consumers", func(l *idleLog) bool { return l.peers >= 10 })
	l.mu.Lock()
	learnt, lastSweep := time.Now(), l.sweeps[len(l.sweeps)-1]
	l.mu.Unlock()

	// One interval and a half after the view changed, the sweep due one
	// interval (±20%) after the last would have come. No wait on an event
	// can show that something does not happen: this one is bounded.
	<-time.After(cfg.SweepInterval * 3 / 2)
	seePeers()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.sweeps); l.sweeps[n-1].After(learnt) {
		t.Errorf("w0 swept %v after it learnt of 10 consumers (its last sweep before, %v before), want none for about %v",
			l.sweeps[n-1].Sub(learnt), learnt.Sub(lastSweep), 10*cfg.SweepInterval)
	}
}
