package watch_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/watch"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// TestPipelinePassesWhatMakesASlotClaimable: on the server, each write that
// can make a slot claimable comes through the stream's filter, and none of
// those that cannot does. A write that should pass and was filtered out
// leaves the workers asleep until their poll (a quarter of a minute with a
// stream open).
func TestPipelinePassesWhatMakesASlotClaimable(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := t.Context()
	if !mschedulertest.HasChangeStreams(ctx, coll) {
		t.Skip("this server has no change streams (a standalone MongoDB, or the development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set)")
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "t"}, {Key: "free", Value: 1}, {Key: "plan", Value: bson.D{{Key: "every", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
	cs, err := coll.Watch(ctx, watch.Pipeline())
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	set := func(f bson.D) bson.D { return bson.D{{Key: "$set", Value: f}} }
	mark := int64(100)
	for _, c := range []struct {
		name   string
		update bson.D
		passes bool
	}{
		{"a ping", set(bson.D{{Key: "holders.w.lease_until", Value: time.Now()}}), false},
		{"a claim that leaves no slot free", set(bson.D{{Key: "free", Value: 0}}), false},
		{"a freed slot", set(bson.D{{Key: "free", Value: 1}}), true},
		{"a moved run_at", set(bson.D{{Key: "run_at", Value: time.Now()}}), true},
		{"a status pending", set(bson.D{{Key: "status", Value: "pending"}}), true},
		{"a claim", set(bson.D{{Key: "status", Value: "running"}}), true},
		{"a run end that leaves the task final", set(bson.D{{Key: "status", Value: "succeeded"}}), false},
		{"a cancel", set(bson.D{{Key: "status", Value: "cancelled"}}), true},
		{"a plan finished", set(bson.D{{Key: "status", Value: "finished"}}), false},
		{"a concurrency", set(bson.D{{Key: "concurrency", Value: 3}}), true},
		{"a plan's occurrence begun", set(bson.D{{Key: "plan.started", Value: true}}), true},
		{"a plan's counts", bson.D{{Key: "$inc", Value: bson.D{{Key: "plan.skipped", Value: 1}}}}, false},
		{"a pause", set(bson.D{{Key: "paused", Value: true}}), false},
		{"a resume", bson.D{{Key: "$unset", Value: bson.D{{Key: "paused", Value: ""}}}}, true},
		{"a pause set again", set(bson.D{{Key: "paused", Value: true}}), false},
		{"a pause lifted by hand", set(bson.D{{Key: "paused", Value: false}}), true},
	} {
		if _, err := coll.UpdateByID(ctx, "t", c.update); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// A mark after each write, which passes: the next event is the
		// write's if it passed, the mark's if not.
		mark++
		if _, err := coll.UpdateByID(ctx, "t", set(bson.D{{Key: "concurrency", Value: mark}})); err != nil {
			t.Fatal(err)
		}
		isMark := func(e bson.Raw) bool {
			n, ok := e.Lookup("updateDescription", "updatedFields", "concurrency").AsInt64OK()
			return ok && n == mark
		}
		got := next(t, cs)
		if passed := !isMark(got); passed != c.passes {
			t.Errorf("%s: passed the filter %v, want %v (event %s)", c.name, passed, c.passes, got)
		}
		if !isMark(got) {
			if m := next(t, cs); !isMark(m) {
				t.Fatalf("%s: after the write's event, %s, want the mark", c.name, m)
			}
		}
	}
}

// next is the stream's next event, within a minute.
func next(t *testing.T, cs *mongo.ChangeStream) bson.Raw {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if !cs.Next(ctx) {
		t.Fatalf("no event: %v", cs.Err())
	}
	return slices.Clone(cs.Current)
}
