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

// TestAClaimAnsweredAfterItsLeaseLapsedIsRenewedBeforeItRuns: on a busy
// server a claim may be answered after the lease it took has lapsed. The
// pinger would find the run lapsed and cancel it unrun, and the task would
// wait for a sweep and count a failed run. The run is renewed first, with
// a ping fenced on it as every ping is, and then runs; when the run was
// taken over meanwhile, the renewal misses and the run is dropped unrun.
func TestAClaimAnsweredAfterItsLeaseLapsedIsRenewedBeforeItRuns(t *testing.T) {
	for _, takenOver := range []bool{false, true} {
		t.Run(map[bool]string{false: "held", true: "taken over"}[takenOver], func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
				t.Fatal(err)
			}
			proxy, held := heldCollection(t, coll, false)
			claim := proxy.Hold(mschedulertest.BeforeReply, mschedulertest.Updating(coll.Name(), "holders.w"))
			ev := mschedulertest.NewEvents()
			cfg := fastConfig("w", ev)
			cfg.SweepInterval = time.Hour // no sweep of its own takes the run while its claim is held
			var calls atomic.Int32
			startConsumer(t, held, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
				calls.Add(1)
				return 1, nil
			}, cfg)
			waitHeld(t, claim, "the claim")
			if takenOver {
				editTask(t, coll, "k", bson.D{{Key: "$set", Value: bson.D{{Key: "holders.w.run", Value: "a-sweep-took-it"}}}})
			}
			time.Sleep(1500 * time.Millisecond) // the fault: the claim's reply comes after its 1 s lease
			claim.Release()
			if takenOver {
				ev.WaitCount(t, mscheduler.EventLeaseLost, 1)
				if n := calls.Load(); n != 0 {
					t.Fatalf("the handler of a run taken over before it started was called %d times", n)
				}
				return
			}
			ev.WaitCount(t, mscheduler.EventSucceeded, 1)
			for _, e := range ev.Snapshot() {
				if e.Kind == mscheduler.EventLeaseLost || e.Kind == mscheduler.EventExpired {
					t.Errorf("event %v: %v", e.Kind, e.Err)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("handler called %d times, want 1", n)
			}
		})
	}
}
