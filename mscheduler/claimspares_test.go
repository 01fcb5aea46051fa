package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// claimReads counts, on a client of its own, the candidate queries (finds
// sorted in claim order), the claims by findAndModify it sends (byKey: of
// them, those that name their task's _id), and the reads back of claimed
// tasks (finds of a list of _ids).
type claimReads struct{ candidates, findAndModify, byKey, readBacks atomic.Int64 }

func (r *claimReads) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch {
		case e.CommandName == "findAndModify" && e.Command.Lookup("update", "$inc", "running").Type != 0:
			r.findAndModify.Add(1)
			if e.Command.Lookup("query", "_id").Type != 0 {
				r.byKey.Add(1)
			}
		case e.CommandName == "find" && e.Command.Lookup("sort", "priority").Type != 0 && e.Command.Lookup("filter", "free").Type != 0:
			r.candidates.Add(1)
		case e.CommandName == "find" && e.Command.Lookup("filter", "_id", "$in").Type != 0:
			r.readBacks.Add(1)
		}
	}}
}

// drainOneSlot publishes n tasks of one priority and concurrency conc,
// due one millisecond apart, drains them with a consumer of one slot
// configured by edit, and returns the keys in the order their handlers
// ran and the commands counted.
func drainOneSlot(t *testing.T, n, conc int, edit func(*mscheduler.ConsumerConfig)) ([]string, *claimReads) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	base := time.Now().Add(-time.Hour)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i), RunAt: base.Add(time.Duration(i) * time.Millisecond), Concurrency: conc}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	reads := &claimReads{}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(reads.monitor()))
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 1
	edit(cfg)
	var mu sync.Mutex
	var order []string
	startConsumer(t, dbCollection(client, coll), func(_ context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		order = append(order, task.Key)
		mu.Unlock()
		return 0, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, n*conc)
	mu.Lock()
	defer mu.Unlock()
	return order, reads
}

// TestClaimsFromSpares: a consumer of one slot draining a backlog reads
// candidates once for many claims, and claims from its spares in claim
// order, each task once; with NoClaimSpares it claims each with a
// findAndModify.
func TestClaimsFromSpares(t *testing.T) {
	const n = 32
	t.Run("spares", func(t *testing.T) {
		order, reads := drainOneSlot(t, n, 1, func(c *mscheduler.ConsumerConfig) { c.ClaimSpareFor = time.Minute })
		for i, key := range order {
			if want := fmt.Sprintf("k%02d", i); key != want {
				t.Fatalf("run %d was %s, want %s (claim order): %v", i, key, want, order)
			}
		}
		// The first claim reads candidates (it knows of no lease yet);
		// the next reads 16 candidates, one claim and 15 spares; the one
		// after them reads the other 15; the last finds none left.
		if c, f := reads.candidates.Load(), reads.findAndModify.Load(); c > 4 || f > 2 {
			t.Errorf("%d candidate queries and %d findAndModify claims for %d tasks, want at most 4 and 2", c, f, n)
		}
	})
	t.Run("none", func(t *testing.T) {
		_, reads := drainOneSlot(t, n, 1, func(c *mscheduler.ConsumerConfig) { c.ClaimSpareFor = mscheduler.NoClaimSpares })
		// The first claim reads candidates (it knows of no lease yet).
		if f := reads.findAndModify.Load(); f < n-1 {
			t.Errorf("without spares: %d findAndModify claims for %d tasks, want one each after the first", f, n)
		}
	})
}

// TestSparesOfConcurrencyAboveOneAreClaimedByKey: a consumer of one slot
// draining tasks of concurrency 2 claims each slot from a spare, or from
// a read that keeps spares, with a findAndModify naming the task's _id,
// whose reply is the task as claimed: no claim of whichever task comes
// first (a sorted query over every claimable task), and no read back.
// Each slot of each task runs once, in claim order.
func TestSparesOfConcurrencyAboveOneAreClaimedByKey(t *testing.T) {
	const n = 24
	order, reads := drainOneSlot(t, n, 2, func(c *mscheduler.ConsumerConfig) { c.ClaimSpareFor = time.Minute })
	runs := map[string]int{}
	for _, key := range order {
		runs[key]++
	}
	for i := range n {
		if key := fmt.Sprintf("k%02d", i); runs[key] != 2 {
			t.Errorf("%s ran %d times, want 2 (its concurrency)", key, runs[key])
		}
	}
	// The first claim reads candidates (it knows of no lease yet) and may
	// read back what it won; every claim after it names its task.
	if sorted := reads.findAndModify.Load() - reads.byKey.Load(); sorted > 0 {
		t.Errorf("%d claims by findAndModify of whichever task comes first, want none", sorted)
	}
	if b := reads.readBacks.Load(); b > 1 {
		t.Errorf("%d reads back of claimed tasks, want at most the first claim's", b)
	}
	// The tasks' second slots come back as candidates once their first
	// runs end: a read holds the first slots of many tasks, or the second
	// slot of one, so the reads stay well below one per run.
	if c, runs := reads.candidates.Load(), int64(2*n); c > runs/2 {
		t.Errorf("%d candidate queries for %d runs, want at most %d", c, runs, runs/2)
	}
}

// TestSpareChangedSinceItsRead: a task changed after a claim read it as
// a spare runs as changed: its params replaced (the change raises its
// rev), or the task deleted and published again under its key (rev 0
// again, but created anew); either way the claim from the spare misses.
// The claim that missed reads afresh at once instead of waiting for the
// poll (a minute here).
func TestSpareChangedSinceItsRead(t *testing.T) {
	for name, change := range map[string]func(*testing.T, *mscheduler.Producer[int]){
		"params replaced": func(t *testing.T, p *mscheduler.Producer[int]) {
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k02", Params: 100}, &mscheduler.PublishOpts{UpdateParams: true}); err != nil {
				t.Fatal(err)
			}
		},
		"deleted and published again": func(t *testing.T, p *mscheduler.Producer[int]) {
			if err := p.Delete(ctxT(t), "k02", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k02", Params: 100, RunAt: time.Now().Add(-time.Hour)}, nil); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) { spareChanged(t, change) })
	}
}

func spareChanged(t *testing.T, change func(*testing.T, *mscheduler.Producer[int])) {
	const n = 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	base := time.Now().Add(-time.Hour)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%02d", i), Params: i, RunAt: base.Add(time.Duration(i) * time.Millisecond)}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.PollInterval, cfg.ClaimSpareFor = 1, time.Minute, time.Minute
	var mu sync.Mutex
	seen := map[string]int{}
	entered, release := make(chan struct{}), make(chan struct{})
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		seen[task.Key] = task.Params
		mu.Unlock()
		if task.Key == "k01" { // claimed by the read that kept k02 and on as spares
			close(entered)
			<-release
		}
		return 0, nil
	}, cfg)
	<-entered
	change(t, p)
	close(release)
	ev.WaitCountWithin(t, 20*time.Second, mscheduler.EventSucceeded, n)
	mu.Lock()
	defer mu.Unlock()
	if seen["k02"] != 100 {
		t.Errorf("k02 ran with params %d, want 100 (changed after the spare was read)", seen["k02"])
	}
}

// TestClaimSpareForIsChecked: NoClaimSpares and durations up to a minute
// are taken; anything else is refused naming the field.
func TestClaimSpareForIsChecked(t *testing.T) {
	coll := mschedulertest.Collection(t)
	noop := func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }
	for d, ok := range map[time.Duration]bool{0: true, mscheduler.NoClaimSpares: true, time.Minute: true, -2 * time.Second: false, 2 * time.Minute: false} {
		_, err := mscheduler.NewConsumer(coll, noop, &mscheduler.ConsumerConfig{ClaimSpareFor: d})
		var ie *mscheduler.InvalidError
		switch {
		case ok && err != nil:
			t.Errorf("ClaimSpareFor %s: %v", d, err)
		case !ok && (!errors.As(err, &ie) || ie.Field != "ClaimSpareFor"):
			t.Errorf("ClaimSpareFor %s: got %v, want an InvalidError naming ClaimSpareFor", d, err)
		}
	}
}

// TestSparesReadHoldsClaimsOfItsShare: a read that keeps spares holds
// about eight claims of the consumer's own share (a peers-th of what it
// reads) at any number of consumers, up to its cap; without spares, and
// for one consumer, it reads what it did before.
func TestSparesReadHoldsClaimsOfItsShare(t *testing.T) {
	const k = 16
	for _, peers := range []int{1, 2, 4, 8, 12, 16, 64} {
		withSpares := mscheduler.CandidateLimit(k, peers, true)
		if own := withSpares / peers; own < 8*k && withSpares < 1024 {
			t.Errorf("%d consumers: a read of %d holds %d of this consumer's share, want at least %d", peers, withSpares, own, 8*k)
		}
		if withSpares > 1024 {
			t.Errorf("%d consumers: a read of %d candidates, want at most 1024", peers, withSpares)
		}
		if without := mscheduler.CandidateLimit(k, peers, false); without != k*max(4, min(peers, 8)) {
			t.Errorf("%d consumers without spares: a read of %d, want %d", peers, without, k*max(4, min(peers, 8)))
		}
	}
	if got := mscheduler.CandidateLimit(k, 1, true); got != 128 {
		t.Errorf("one consumer: a read of %d keeping spares, want 128 as before", got)
	}
	if got := mscheduler.CandidateLimit(1, 1, true); got != 16 {
		t.Errorf("one slot: a read of %d keeping spares, want 16", got)
	}
}
