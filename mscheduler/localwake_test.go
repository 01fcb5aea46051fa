package mscheduler_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestPublishWakesLocalConsumer: a task published through the client of a
// consumer that polls once an hour, and has looked and found nothing,
// starts at once; a stopped consumer is no longer woken.
func TestPublishWakesLocalConsumer(t *testing.T) {
	coll, claimTried := watchedCollection(t)
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.PollInterval, cfg.ChangeStreamPollInterval, cfg.SweepInterval = time.Hour, time.Hour, time.Hour
	c := startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	waitSignal(t, claimTried, "the consumer never tried to claim")
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "a"}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCountWithin(t, 30*time.Second, mscheduler.EventSucceeded, 1) // an hour's poll would fail this
	if err := c.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if st := readTask(t, coll, "b"); mscheduler.Status(st.Status) != mscheduler.StatusPending {
		t.Fatalf("b = %s after the consumer stopped, want pending", st.Status)
	}
}

// watchedCollection is the test's collection through a client of its own,
// with a signal on every successful findAndModify (a claim, or a ping).
func watchedCollection(t *testing.T) (*mongo.Collection, <-chan struct{}) {
	t.Helper()
	signal := make(chan struct{}, 1)
	coll := onFindAndModify(t, func() {
		select {
		case signal <- struct{}{}:
		default:
		}
	})
	return coll, signal
}

// onFindAndModify is the test's collection through a client of its own
// that calls f after every successful findAndModify.
func onFindAndModify(t *testing.T, f func()) *mongo.Collection {
	t.Helper()
	monitor := &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
		if e.CommandName == "findAndModify" {
			f()
		}
	}}
	coll := mschedulertest.Collection(t)
	own := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	return own.Database(coll.Database().Name()).Collection(coll.Name())
}

func waitSignal(t *testing.T, signal <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-signal:
	case <-ctxT(t).Done():
		t.Fatal(failure)
	}
}
