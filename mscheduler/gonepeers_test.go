package mscheduler_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// holdLapsing makes task key look held by worker, its lease lapsing at
// lapse, as a worker killed after its claim leaves it.
func holdLapsing(t *testing.T, coll *mongo.Collection, key, worker string, lapse time.Time) {
	t.Helper()
	started := lapse.Add(-time.Second)
	set := bson.D{
		{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0}, {Key: "next_expiry", Value: lapse},
		{Key: "holders." + worker, Value: bson.D{{Key: "run", Value: "run-of-" + worker}, {Key: "started", Value: started}, {Key: "lease_until", Value: lapse}}},
	}
	if _, err := coll.UpdateOne(ctxT(t), bson.D{{Key: "key", Value: key}}, bson.D{{Key: "$set", Value: set}, {Key: "$inc", Value: bson.D{{Key: "rev", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestAWorkerWhoseRunExpiredIsForgotten: a worker whose run a sweep
// records expired is presumed gone: the sweeping consumer removes it from
// the consumers it counts (the registry's consumers document) at once,
// rather than counting it alive for peerLapse maintenance intervals and
// spreading its own sweeps by it. A worker that announced after its run's
// lease lapsed stays.
func TestAWorkerWhoseRunExpiredIsForgotten(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	for _, key := range []string{"dead-run", "back-run"} {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: key, WorkerIDs: []string{"dead", "back"}, PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lapse := time.Now().Add(300 * time.Millisecond)
	holdLapsing(t, coll, "dead-run", "dead", lapse)
	holdLapsing(t, coll, "back-run", "back", lapse)
	meta := coll.Database().Collection(coll.Name() + ".meta")
	seen := bson.D{{Key: "seen.dead", Value: lapse.Add(-2 * time.Second)}, {Key: "seen.back", Value: lapse.Add(time.Second)}}
	if _, err := meta.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "consumers"}}, bson.D{{Key: "$set", Value: seen}}, options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatal(err)
	}

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("sweeper", ev)
	cfg.SweepInterval, cfg.MaintenanceInterval = 100*time.Millisecond, time.Hour // no announce but those the expiries bring
	startConsumer(t, coll, noop, cfg)
	ev.WaitCount(t, mscheduler.EventExpired, 2)

	waitUntil(t, time.Minute, "the dead worker to leave the consumers document", func() bool {
		raw, err := meta.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "consumers"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		_, deadErr := raw.LookupErr("seen", "dead")
		_, backErr := raw.LookupErr("seen", "back")
		if backErr != nil {
			t.Fatalf("the worker that announced after its run lapsed was forgotten: %v", raw)
		}
		return deadErr != nil
	})
}
