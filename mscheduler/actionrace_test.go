package mscheduler_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// retryChanging runs an action again while it reports that the task kept
// changing, as a caller racing busy workers would.
func retryChanging(ctx context.Context, action func(context.Context) error) error {
	for {
		err := action(ctx)
		if err == nil || !strings.Contains(err.Error(), "kept changing") || ctx.Err() != nil {
			return err
		}
	}
}

// TestActionsAndRunEndsKeepEachOthersWrites: while two workers end runs of
// a task as fast as they can, Update raises its concurrency step by step
// and Pause and Resume toggle it. Every write is fenced on what it read,
// so none is lost: the task ends with exactly the final concurrency of
// successes, its counters agree, and the history holds each run once.
func TestActionsAndRunEndsKeepEachOthersWrites(t *testing.T) {
	const first, last = 10, 30
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: first}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	for _, id := range []string{"w1", "w2"} {
		cfg := fastConfig(id, ev)
		cfg.Capacity = 3
		startConsumer(t, dbCollection(mschedulertest.NewClient(t), coll), func(context.Context, *mscheduler.Task[int]) (int, error) {
			return 1, nil
		}, cfg)
	}

	g, ctx := errgroup.WithContext(ctxT(t))
	g.Go(func() error {
		for c := first + 1; c <= last; c++ {
			if err := retryChanging(ctx, func(ctx context.Context) error {
				return p.Update(ctx, "k", mscheduler.TaskUpdate{Concurrency: ptr(c)})
			}); err != nil {
				return err
			}
		}
		return nil
	})
	g.Go(func() error {
		for range 10 {
			if err := retryChanging(ctx, func(ctx context.Context) error { return p.Pause(ctx, "k") }); err != nil {
				return err
			}
			if err := retryChanging(ctx, func(ctx context.Context) error { return p.Resume(ctx, "k") }); err != nil {
				return err
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	done, err := p.Wait(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != mscheduler.StatusSucceeded || done.Task.Concurrency != last || done.Succeeded != last ||
		done.Running != 0 || done.Free != 0 || done.FailedRuns != 0 {
		t.Fatalf("task ended %s, concurrency %d, %d succeeded, %d running, %d free, %d failed; want succeeded with %d successes and nothing else",
			done.Status, done.Task.Concurrency, done.Succeeded, done.Running, done.Free, done.FailedRuns, last)
	}
	waitUntil(t, waitTimeout, "every run's history record", func() bool {
		return countDocs(t, historyOf(coll), bson.D{{Key: "key", Value: "k"}}) >= last
	})
	if n := countDocs(t, historyOf(coll), bson.D{{Key: "key", Value: "k"}, {Key: "outcome", Value: mscheduler.OutcomeSucceeded}}); n != last {
		t.Fatalf("%d succeeded runs in the history, want %d", n, last)
	}
}

// TestActionReadsAgainAfterAConcurrentWrite: a run end that lands between
// Retry's read and its write (here, from the command monitor, just before
// the write goes out) makes the write miss its rev fence; Retry reads
// again, so the free slots it sets count the run that ended.
func TestActionReadsAgainAfterAConcurrentWrite(t *testing.T) {
	coll := mschedulertest.Collection(t)
	var once sync.Once
	var endErr error
	monitor := &event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		once.Do(func() {
			// What a run end of the task's one running run writes.
			_, endErr = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}}, bson.D{{Key: "$inc", Value: bson.D{
				{Key: "running", Value: -1}, {Key: "free", Value: 1}, {Key: "rev", Value: 1}}}})
		})
	}}
	own := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor)).Database(coll.Database().Name()).Collection(coll.Name())
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 3, RunAt: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	// Cancelled with one run still going, as Cancel leaves a running task.
	if _, err := coll.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "k"}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "status", Value: mscheduler.StatusCancelled}}},
		{Key: "$inc", Value: bson.D{{Key: "running", Value: 1}, {Key: "free", Value: -1}, {Key: "rev", Value: 1}}},
	}); err != nil {
		t.Fatal(err)
	}
	racing, err := mscheduler.NewProducer[int](own, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := racing.Retry(ctxT(t), "k"); err != nil || endErr != nil {
		t.Fatalf("Retry: %v (run end: %v)", err, endErr)
	}
	info, err := p.Get(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Free != 3 || info.Running != 0 || info.Status != mscheduler.StatusPending {
		t.Fatalf("after Retry: %s, %d free, %d running; want pending with all 3 slots free", info.Status, info.Free, info.Running)
	}
}
