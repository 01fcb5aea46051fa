package mscheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Regression cases of bugs the state-machine test found.

// TestEndInTheSweepsMillisecondIsLost: a run whose lease lapsed is
// expired by another worker's sweep; its own worker then writes its end in
// the very millisecond the sweep wrote. The end used to find the run's
// history mark with its own finish time and take the sweep's write for its
// own: it reported the run as ended, when it had been recorded expired and
// would run again.
func TestEndInTheSweepsMillisecondIsLost(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	clock := &fakeClock{base: time.Now()}
	p := newProducer[map[string]any](t, coll, &mscheduler.ProducerConfig{Clock: clock.wall, Monotonic: clock.mono})
	w1, err := mscheduler.NewWorker(ctx, coll, "w1", clock.wall, clock.mono, mscheduler.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := mscheduler.NewWorker(ctx, coll, "w2", clock.wall, clock.mono, mscheduler.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	mscheduler.ShareClock(w1, p, w2)
	if _, err := p.Publish(ctx, mscheduler.Task[map[string]any]{Key: "k", WorkerTimeout: 30 * time.Second, PingInterval: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Millisecond)
	r, err := w1.Claim(ctx)
	if err != nil || r == nil {
		t.Fatalf("claim: %v, %v", r, err)
	}
	clock.advance(31 * time.Second)
	if err := w2.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w1.End(ctx, r.RunID, mscheduler.OutcomeSucceeded); !errors.Is(err, mscheduler.ErrLeaseLost) {
		t.Fatalf("end of the expired run = %v, want ErrLeaseLost", err)
	}
	info, err := p.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != mscheduler.StatusPending || info.FailedRuns != 1 || info.Succeeded != 0 {
		t.Fatalf("task %s, %d failed runs, %d successes: want pending with the expiry counted", info.Status, info.FailedRuns, info.Succeeded)
	}
}

// TestResetFinishedDropsWhatTheNewTaskLacks: publishing a finished task
// again with ResetFinished set every field of the new task but left those
// it lacks, so the old plan, group, allow-list, tags and the rest stayed,
// and the reset task was the old one again (a plan gate gave its claims
// back).
func TestResetFinishedDropsWhatTheNewTaskLacks(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	p := newProducer[map[string]any](t, coll, nil)
	plan := mscheduler.Every(20, mscheduler.Second)
	old := mscheduler.Task[map[string]any]{Key: "k", Plan: &plan, Group: "g", WorkerIDs: []string{"w9"}, Tags: []string{"t"},
		Description: "old", Source: "old", Timeout: time.Minute}
	if _, err := p.Publish(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	res, err := p.Publish(ctx, mscheduler.Task[map[string]any]{Key: "k"}, &mscheduler.PublishOpts{ResetFinished: true})
	if err != nil || res.Outcome != mscheduler.PublishUpdated {
		t.Fatalf("reset: %v, %v", res, err)
	}
	var doc bson.M
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"plan", "group", "worker_ids", "tags", "description", "timeout_ms"} {
		if v, ok := doc[f]; ok {
			t.Errorf("the reset task keeps %s: %v", f, v)
		}
	}
	if doc["status"] != "pending" {
		t.Errorf("status %v, want pending", doc["status"])
	}
}
