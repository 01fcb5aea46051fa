package mscheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestARefusedClaimNamesItsOwnTask: a claim of whichever task comes first
// is refused on a field of that task (a rev edited into a string), and the
// task leaves the claimable ones before the worker looks for it (another
// worker set it invalid). The worker must not take the next task for the
// culprit: the sound task runs and succeeds, and is never set invalid (the
// vandal soak caught a sound task set invalid for another's rev).
func TestARefusedClaimNamesItsOwnTask(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "first", Priority: 10}, nil); err != nil {
		t.Fatal(err)
	}
	var refusedSeen, culpritGone atomic.Bool
	proxy, client := newCmdProxy(t, func(name string, body bson.Raw) bool {
		if refusedSeen.Load() && name == "find" && culpritGone.CompareAndSwap(false, true) {
			setFields(t, coll, "bad", bson.D{{Key: "status", Value: "invalid"}})
		}
		return false
	})
	proxy.dropIf = func(name string, body, reply bson.Raw) bool {
		if isClaim(name, body) {
			if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok == 0 {
				refusedSeen.Store(true)
			}
		}
		return false
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Capacity = 1 // one slot: after the first claim, a claim is one findAndModify
	startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)

	due := time.Now().Add(time.Second) // edited before it is due
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "bad", Priority: 5, RunAt: due}, {Key: "good", Priority: 1, RunAt: due}}, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "bad", bson.D{{Key: "rev", Value: "0"}})
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
	if !refusedSeen.Load() || !culpritGone.Load() {
		t.Fatalf("refused claim seen %v, culprit gone before the worker looked %v: the test did not set up its race", refusedSeen.Load(), culpritGone.Load())
	}
	if st, state, _ := stRead(t, coll, "good"); st.Status != "succeeded" {
		t.Fatalf("the sound task: %s, want succeeded", state)
	}
}
