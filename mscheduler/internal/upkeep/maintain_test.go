package upkeep_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

func worker(t *testing.T, id string) *upkeep.Worker {
	return &upkeep.Worker{Coll: mschedulertest.Collection(t), ID: id, Clock: serverclock.New(nil, nil, time.Minute),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestABrokenLeaseIsReplaced: a maintenance lease document no lease's
// filter can match is replaced by the next worker that tries to take it; a
// sound lease another worker holds is left to it.
func TestABrokenLeaseIsReplaced(t *testing.T) {
	ctx := context.Background()
	for _, broken := range []bson.D{
		{{Key: "holder", Value: "gone"}, {Key: "lease_until", Value: "2020-01-01"}},
		{{Key: "holder", Value: "gone"}},
		{{Key: "junk", Value: 1}},
	} {
		w := worker(t, "w1")
		meta := upkeep.MetaCollection(w.Coll)
		if _, err := meta.InsertOne(ctx, append(bson.D{{Key: "_id", Value: stored.MaintenanceID}}, broken...)); err != nil {
			t.Fatal(err)
		}
		held, err := w.TakeMaintenance(ctx, time.Now(), time.Minute)
		if err != nil || !held {
			t.Fatalf("lease %v: held %v, %v; want it replaced and held", broken, held, err)
		}
		raw, err := meta.FindOne(ctx, bson.D{{Key: "_id", Value: stored.MaintenanceID}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if l, prob := stored.LeaseOf(raw); prob != nil || l.Holder != "w1" {
			t.Fatalf("lease after %v: %v, %v", broken, l, prob)
		}
		_ = meta.Drop(ctx)
	}
	w, other := worker(t, "w1"), worker(t, "w2")
	other.Coll = w.Coll
	if held, err := other.TakeMaintenance(ctx, time.Now(), time.Minute); err != nil || !held {
		t.Fatalf("first take: %v, %v", held, err)
	}
	if held, err := w.TakeMaintenance(ctx, time.Now(), time.Minute); err != nil || held {
		t.Fatalf("a sound lease of another worker: held %v, %v; want it left to w2", held, err)
	}
	_ = upkeep.MetaCollection(w.Coll).Drop(ctx)
}
