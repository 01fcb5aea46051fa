package upkeep_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// TestAHolderIsOverdueAfterTwoPingIntervalsWithoutARenewal: a sweep comes
// back for a lease only when its holder has not renewed it for two of the
// task's ping intervals, counted from when the lease was last renewed (a
// ping, or a run's start before its first ping), stretched leases
// included; a task it cannot read so far is overdue.
func TestAHolderIsOverdueAfterTwoPingIntervalsWithoutARenewal(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	task := func(holders map[string]stored.Holder) bson.Raw {
		t.Helper()
		raw, err := bson.Marshal(stored.Task{
			ID: "k", Key: "k", Schema: stored.SchemaVersion, Params: bson.RawValue{Type: bson.TypeNull}, Status: stored.StatusRunning, Concurrency: 2,
			PingIntervalMS: 300, WorkerTimeoutMS: 1500, Holders: holders, CreatedAt: now, UpdatedAt: now, RunAt: now,
		})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	pinged := func(ago time.Duration) stored.Holder {
		return stored.Holder{Run: "r", Started: now.Add(-time.Minute), LeaseUntil: now.Add(-ago).Add(1500 * time.Millisecond)}
	}
	for _, c := range []struct {
		name    string
		raw     bson.Raw
		overdue bool
	}{
		{"pinged an interval ago", task(map[string]stored.Holder{"w": pinged(300 * time.Millisecond)}), false},
		{"pinged just under two intervals ago", task(map[string]stored.Holder{"w": pinged(590 * time.Millisecond)}), false},
		{"pinged more than two intervals ago", task(map[string]stored.Holder{"w": pinged(700 * time.Millisecond)}), true},
		{"one holder of two overdue", task(map[string]stored.Holder{"a": pinged(100 * time.Millisecond), "b": pinged(time.Second)}), true},
		{"started, not pinged yet", task(map[string]stored.Holder{"w": {Run: "r", Started: now.Add(-200 * time.Millisecond), LeaseUntil: now.Add(-200 * time.Millisecond).Add(taskstate.ClaimLease)}}), false},
		{"started long ago, never pinged", task(map[string]stored.Holder{"w": {Run: "r", Started: now.Add(-time.Second), LeaseUntil: now.Add(-time.Second).Add(taskstate.ClaimLease)}}), true},
		{"a stretched lease pinged an interval ago", task(map[string]stored.Holder{"w": {Run: "r", Started: now.Add(-time.Minute), LeaseMS: 6000, LeaseUntil: now.Add(-300 * time.Millisecond).Add(6 * time.Second)}}), false},
		{"a stretched lease pinged a second ago", task(map[string]stored.Holder{"w": {Run: "r", Started: now.Add(-time.Minute), LeaseMS: 6000, LeaseUntil: now.Add(-time.Second).Add(6 * time.Second)}}), true},
		{"no holder: a bound to repair", task(nil), true},
		{"holders of the wrong type", mustMarshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "holders", Value: "x"}, {Key: "ping_interval_ms", Value: int64(300)}}), true},
	} {
		if got := upkeep.Overdue(c.raw, now); got != c.overdue {
			t.Errorf("%s: overdue %v, want %v", c.name, got, c.overdue)
		}
	}
}

func mustMarshal(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
