package upkeep_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestASkipNeverHidesATaskThatMoved: the sweep leaves out a task it could
// not write only as it read it. A ping (its holder's lease), a claim or a
// run end (rev) since, and the task is read again at once, however long
// the skip had left: a skip must never hide the next lapsed lease.
func TestASkipNeverHidesATaskThatMoved(t *testing.T) {
	ctx := context.Background()
	coll := mschedulertest.Collection(t)
	lapsed := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	docs := []any{
		bson.D{{Key: "_id", Value: "held"}, {Key: "rev", Value: int64(3)}, {Key: "next_expiry", Value: lapsed},
			{Key: "holders", Value: bson.D{{Key: "w", Value: bson.D{{Key: "run", Value: "r1"}, {Key: "lease_until", Value: lapsed}}}}}},
		bson.D{{Key: "_id", Value: "bare"}, {Key: "next_expiry", Value: lapsed}}, // no rev, no holders: edited by hand
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var skips upkeep.SweepSkips
	skipAll := func() {
		t.Helper()
		cur, err := coll.Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var raws []bson.Raw
		if err := cur.All(ctx, &raws); err != nil {
			t.Fatal(err)
		}
		for _, raw := range raws {
			skips.Skip(raw, time.Now().Add(time.Hour))
		}
	}
	swept := func() []string {
		t.Helper()
		cur, err := coll.Find(ctx, bson.D{{Key: "next_expiry", Value: bson.D{{Key: "$lte", Value: time.Now()}}}, {Key: "$nor", Value: skips.Filters(time.Now())}})
		if err != nil {
			t.Fatal(err)
		}
		var out []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &out); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(out))
		for i, d := range out {
			ids[i] = d.ID
		}
		return ids
	}
	skipAll()
	if ids := swept(); len(ids) != 0 {
		t.Fatalf("as read, the sweep left out nothing of %v", ids)
	}
	for _, move := range []struct {
		what   string
		update bson.D
	}{
		{"a ping", bson.D{{Key: "$set", Value: bson.D{{Key: "holders.w.lease_until", Value: lapsed.Add(time.Second)}}}}},
		{"a claim or run end", bson.D{{Key: "$inc", Value: bson.D{{Key: "rev", Value: 1}}}}},
	} {
		if _, err := coll.UpdateByID(ctx, "held", move.update); err != nil {
			t.Fatal(err)
		}
		if ids := swept(); len(ids) != 1 || ids[0] != "held" {
			t.Fatalf("after %s the sweep reads %v, want the task that moved", move.what, ids)
		}
		skipAll()
	}
	if _, err := coll.UpdateByID(ctx, "bare", bson.D{{Key: "$set", Value: bson.D{{Key: "rev", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if ids := swept(); len(ids) != 1 || ids[0] != "bare" {
		t.Fatalf("after a rev was given to a task without one the sweep reads %v, want it", ids)
	}
}
