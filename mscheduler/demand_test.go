package mscheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestClaimDemandBoundsClaims: a pulling consumer holds only as many runs
// as its demand asks for, however many tasks wait and slots are free, and
// claims more when the demand rises and Wake is called.
func TestClaimDemandBoundsClaims(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: k}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var demand atomic.Int64
	demand.Store(1)
	release := make(chan struct{})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 8
	cfg.ClaimDemand = func() int { return int(demand.Load()) }
	c := startConsumer(t, coll, heldUntil(release), cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	// Polls go on at 50 ms, and the claim loop holds no more than 1: a
	// claim beyond it would show as a fourth running task below.
	demand.Store(3)
	c.Wake()
	ev.WaitCount(t, mscheduler.EventClaimed, 3)
	if n := countDocs(t, coll, bson.D{{Key: "status", Value: "running"}}); n != 3 {
		t.Fatalf("%d tasks running with a demand of 3 in all, want 3", n)
	}
	demand.Store(0)
	close(release)
	ev.WaitCount(t, mscheduler.EventSucceeded, 3)
	if n := countDocs(t, coll, bson.D{{Key: "status", Value: "pending"}}); n != 1 {
		t.Fatalf("%d tasks left pending, want the one nobody asked for", n)
	}
}

// TestClaimNowReturnsOnceTheDueAreClaimed: ClaimNow returns once the
// tasks due, within the demand, are claimed and announced: the events are
// there when it returns, with no wait for a poll (an hour here). A second
// call with the demand met claims nothing more.
func TestClaimNowReturnsOnceTheDueAreClaimed(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	var demand atomic.Int64
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity, cfg.PollInterval, cfg.Discovery = 8, time.Hour, mscheduler.DiscoveryPoll
	cfg.ClaimDemand = func() int { return int(demand.Load()) }
	release := make(chan struct{})
	defer close(release)
	c := startConsumer(t, coll, heldUntil(release), cfg)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: k}, nil); err != nil {
			t.Fatal(err)
		}
	}
	demand.Store(2)
	if err := c.ClaimNow(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := ev.Count(mscheduler.EventClaimed); n != 2 {
		t.Fatalf("claimed %d when ClaimNow returned, want the 2 demanded", n)
	}
	if err := c.ClaimNow(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := ev.Count(mscheduler.EventClaimed); n != 2 {
		t.Fatalf("claimed %d after a second ClaimNow with the demand met, want 2", n)
	}
}

// TestHandlerReleasesItsRun: a handler returning ErrRelease gives the run
// back: recorded released, not failed, not retried, and the task is
// claimable again at once.
func TestHandlerReleasesItsRun(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: 2}, nil); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errors.Join(errors.New("no executor took it"), mscheduler.ErrRelease)
		}
		return 7, nil
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	info, err := p.Get(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Runs) != 2 || info.Runs[0].Outcome != mscheduler.OutcomeReleased || info.Runs[0].Attempts != 1 || info.FailedRuns != 0 {
		t.Fatalf("runs %+v, failed runs %d: want a released run of one attempt, then a success, and no failure", info.Runs, info.FailedRuns)
	}
	if ev.Count(mscheduler.EventRetried) != 0 {
		t.Fatal("a released run was retried locally")
	}
}
