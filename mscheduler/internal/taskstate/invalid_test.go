package taskstate

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// TestQuarantineOfTheLastHolderIsFencedOnRunning: a quarantine that ends
// the only run it read, and so takes the task out of the sweep's range,
// must miss when a claim came since its read (the run end's document is
// the one read at the claim): else the run claimed since stays held on an
// invalid task that no sweep reads. With other runs as read, it keeps
// next_expiry and needs no such fence.
func TestQuarantineOfTheLastHolderIsFencedOnRunning(t *testing.T) {
	lease := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	read := func(holders ...string) bson.Raw {
		hs := bson.D{}
		for _, h := range holders {
			hs = append(hs, bson.E{Key: h, Value: bson.D{{Key: stored.HRun, Value: "run-" + h}, {Key: stored.HStarted, Value: lease}, {Key: stored.HLeaseUntil, Value: lease}}})
		}
		raw, err := bson.Marshal(bson.D{{Key: stored.FID, Value: "k"}, {Key: stored.FStatus, Value: "running"},
			{Key: stored.FRunning, Value: int32(len(holders))}, {Key: stored.FHolders, Value: hs}, {Key: stored.FNextExpiry, Value: lease}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	prob := &stored.Problem{Field: stored.FMaxFailedRuns, Reason: "must be a whole number"}
	alone := &Quarantine{Raw: read("a"), Problem: prob, Holder: "a", RunID: "run-a"}
	// As the server has it: b claimed the second slot since a's read.
	now := map[string]any{stored.FID: read("a").Lookup(stored.FID), stored.HolderPath("a", stored.HRun): "run-a", stored.FRunning: read("a", "b").Lookup(stored.FRunning)}
	if matches(alone.Filter(), now) {
		t.Fatalf("a quarantine that unsets next_expiry matched after a claim: filter %v", alone.Filter())
	}
	now[stored.FRunning] = read("a").Lookup(stored.FRunning)
	if !matches(alone.Filter(), now) {
		t.Fatalf("the quarantine missed the task as read: filter %v", alone.Filter())
	}
	if !hasUnset(alone.Update(), stored.FNextExpiry) {
		t.Fatal("the quarantine of the last run does not take the task out of the sweep's range")
	}
	shared := &Quarantine{Raw: read("a", "b"), Problem: prob, Holder: "a", RunID: "run-a"}
	if hasUnset(shared.Update(), stored.FNextExpiry) {
		t.Fatal("the quarantine of one run of two unsets next_expiry: the other would never be swept")
	}
}

func hasUnset(update bson.D, field string) bool {
	for _, op := range update {
		if op.Key != "$unset" {
			continue
		}
		for _, e := range op.Value.(bson.D) {
			if e.Key == field {
				return true
			}
		}
	}
	return false
}
