package mscheduler_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// heldRun is one task's run as its holder left it in the task document.
type heldRun struct {
	leaseMS    int64     // holders.<worker>.lease_ms, 0 when absent
	leaseUntil time.Time // holders.<worker>.lease_until
	held       bool
}

func readHeld(t *testing.T, coll *mongo.Collection, key, worker string) heldRun {
	t.Helper()
	raw, err := coll.FindOne(ctxT(t), bson.D{{Key: "key", Value: key}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := raw.Lookup("holders", worker).DocumentOK()
	if !ok {
		return heldRun{}
	}
	ms, _ := h.Lookup("lease_ms").AsInt64OK()
	until, _ := h.Lookup("lease_until").TimeOK()
	return heldRun{leaseMS: ms, leaseUntil: until, held: true}
}

// runStretched starts worker "slow", whose commands take what delay says, on one
// task of worker timeout 3 s and ping interval 500 ms that only it may
// run, and a second worker on a fast path that sweeps every 100 ms, so
// that a lease let lapse would be recorded expired. The handler holds its
// run until release is closed. It returns the task's key, the events of
// both, and a channel closed once the handler began.
func runStretched(t *testing.T, coll *mongo.Collection, delay *adjustableDelay, release <-chan struct{}) (string, *mschedulertest.Events, <-chan struct{}) {
	t.Helper()
	key := publishLeased(t, coll, 1, "slow", 500*time.Millisecond, 3*time.Second, 1)[0]
	started := make(chan struct{})
	handler := func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		close(started)
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	ev := mschedulertest.NewEvents()
	slow := fastConfig("slow", ev)
	slow.Logger = logOnFailure(t)
	startConsumer(t, dbCollection(slowClient(t, delay.delay), coll), handler, slow)
	watch := fastConfig("watching", ev)
	watch.SweepInterval = 100 * time.Millisecond
	startConsumer(t, coll, handler, watch)
	return key, ev, started
}

// finishHeld lets the held run end, and checks that it succeeded with no
// lease lost or expired, its run record saying the longest stretched
// lease it held (lease_ms), at least atLeast.
func finishHeld(t *testing.T, coll *mongo.Collection, key string, ev *mschedulertest.Events, release chan struct{}, atLeast int64) {
	t.Helper()
	close(release)
	ev.WaitCountWithin(t, time.Minute, mscheduler.EventSucceeded, 1)
	if n := ev.Count(mscheduler.EventExpired) + ev.Count(mscheduler.EventLeaseLost); n != 0 {
		t.Errorf("%d leases expired or lost", n)
	}
	raw, err := coll.FindOne(ctxT(t), bson.D{{Key: "key", Value: key}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := raw.Lookup("runs", "0", "lease_ms").AsInt64OK(); ms < atLeast {
		t.Errorf("the run record's lease_ms is %d, want the longest stretched lease the run held, at least %d", ms, atLeast)
	}
}

// TestStretchedRunReturnsToItsWorkerTimeout: a run claimed while every
// command takes 2 s gets a longer lease than its task's 3 s worker
// timeout. Once the server answers at once again, its pings renew it by
// the 3 s and remove its holder's lease_ms: a worker that died holding it
// would be found out as soon as the task says, not a stretched lease
// later. Its run record keeps the longest lease it held.
func TestStretchedRunReturnsToItsWorkerTimeout(t *testing.T) {
	t.Parallel() // it waits on the delay most of its half minute
	coll := mschedulertest.Collection(t)
	var delay adjustableDelay
	delay.set(2 * time.Second)
	release := make(chan struct{})
	key, ev, started := runStretched(t, coll, &delay, release)
	waitClosed(t, started, 2*time.Minute, "the handler to begin")
	first := readHeld(t, coll, key, "slow")
	if !first.held || first.leaseMS <= 3000 {
		t.Fatalf("claimed at 2 s round trips: %+v, want a holder with a lease_ms longer than the 3 s worker timeout", first)
	}

	// Commands queued on a connection behind the 2 s holds still wait
	// their turn after the delay is gone (one connection's commands go in
	// order), and the pings' slowest round trip decays over a few pings:
	// on a loaded machine that took most of a minute.
	delay.set(0)
	waitUntil(t, 3*time.Minute, "a ping to renew the run by its worker timeout", func() bool {
		h := readHeld(t, coll, key, "slow")
		return h.held && h.leaseMS == 0 && time.Until(h.leaseUntil) <= 3*time.Second+500*time.Millisecond
	})
	finishHeld(t, coll, key, ev, release, first.leaseMS)
}

func waitClosed(t *testing.T, c <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}
