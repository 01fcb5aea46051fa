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

// TestWorkerIDsChangeRevokesRun: an operator edits worker_ids while a run
// is going so that its worker is no longer allowed. The run is cancelled at
// its next ping (cause ErrRevoked), recorded as revoked without counting as
// a failure, and an allowed worker finishes the task.
func TestWorkerIDsChangeRevokesRun(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "k", WorkerIDs: []string{"a", "b"}, PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Minute}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, ctx.Err()
	}, fastConfig("a", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	setFields(t, coll, "k", bson.D{{Key: "worker_ids", Value: bson.A{"b"}}})
	ev.WaitCount(t, mscheduler.EventRevoked, 1)
	if cause := <-causes; !errors.Is(cause, mscheduler.ErrRevoked) {
		t.Fatalf("handler context cause = %v, want ErrRevoked", cause)
	}
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, fastConfig("b", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st := readTask(t, coll, "k")
	if st.Status != "succeeded" || st.FailedRuns != 0 || len(st.Runs) != 2 {
		t.Fatalf("task = %+v", st)
	}
	if r := st.Runs[0]; r.Outcome != "revoked" || r.WorkerID != "a" {
		t.Fatalf("first run = %+v, want revoked on a", r)
	}
	if r := st.Runs[1]; r.Outcome != "succeeded" || r.WorkerID != "b" {
		t.Fatalf("second run = %+v, want succeeded on b", r)
	}
}

// TestGroupChangeRevokesRun: the same with the task's group.
func TestGroupChangeRevokesRun(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "k", Group: "cpu", PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Minute}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("cpu-box", ev)
	cfg.Groups = []string{"cpu"}
	startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	setFields(t, coll, "k", bson.D{{Key: "group", Value: "gpu"}})
	ev.WaitCount(t, mscheduler.EventRevoked, 1)
	gpu := fastConfig("gpu-box", ev)
	gpu.Groups = []string{"gpu"}
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, gpu)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if st := readTask(t, coll, "k"); st.Status != "succeeded" || st.Runs[0].Outcome != "revoked" || st.Runs[1].WorkerID != "gpu-box" {
		t.Fatalf("task = %+v", st)
	}
}
