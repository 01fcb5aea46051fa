package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestUpdateReachesRunningTask: "update --worker-ids" from the command
// revokes a run going on a worker that is no longer allowed, at its next
// ping, and the allowed worker finishes the task.
func TestUpdateReachesRunningTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	task := mscheduler.Task[email]{Key: "edited", WorkerIDs: []string{"a", "b"}, PingInterval: 100 * time.Millisecond}
	if _, err := f.producer.Publish(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	f.startConsumer(t, "a", ev, func(ctx context.Context, task *mscheduler.Task[email]) (int, error) {
		if task.Key != "edited" {
			return 0, nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, ctx.Err()
	})
	ev.WaitFor(t, "the claim of edited", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventClaimed && e.Key == "edited" {
				return true
			}
		}
		return false
	})
	f.run("update", "edited", "--worker-ids", "b").wantOK(t)
	select {
	case cause := <-causes:
		if !errors.Is(cause, mscheduler.ErrRevoked) {
			t.Fatalf("handler context cause = %v, want ErrRevoked", cause)
		}
	case <-ctx.Done():
		t.Fatal("the run on a was not revoked")
	}
	f.startConsumer(t, "b", ev, func(context.Context, *mscheduler.Task[email]) (int, error) { return 0, nil })
	ev.WaitFor(t, "the success of edited on b", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventSucceeded && e.Key == "edited" && e.WorkerID == "b" {
				return true
			}
		}
		return false
	})
}

// startConsumer runs a consumer of the fixture's collection until the end
// of the test.
func (f *fixture) startConsumer(t *testing.T, workerID string, ev *mschedulertest.Events, h mscheduler.Handler[email, int]) {
	t.Helper()
	c, err := mscheduler.NewConsumer(f.coll, h, &mscheduler.ConsumerConfig{
		WorkerID: workerID, PollInterval: 50 * time.Millisecond, OnEvent: ev.Record,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}
