package watch

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestOnChangeCancelsTheRunsOfACancelledTaskOnly(t *testing.T) {
	var wakes int
	var cancelled []string
	s := &Stream{Wake: func() { wakes++ }, Cancel: func(key string) { cancelled = append(cancelled, key) }}
	for _, ev := range []bson.D{
		{{Key: "operationType", Value: "insert"}, {Key: "documentKey", Value: bson.D{{Key: "_id", Value: "new"}}}},
		{{Key: "operationType", Value: "update"}, {Key: "documentKey", Value: bson.D{{Key: "_id", Value: "freed"}}},
			{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: bson.D{{Key: "free", Value: 1}, {Key: "status", Value: "pending"}}}}}},
		{{Key: "operationType", Value: "update"}, {Key: "documentKey", Value: bson.D{{Key: "_id", Value: "gone"}}},
			{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: bson.D{{Key: "status", Value: "cancelled"}}}}}},
		// A hand-edited _id of another type names no task to cancel.
		{{Key: "operationType", Value: "update"}, {Key: "documentKey", Value: bson.D{{Key: "_id", Value: 7}}},
			{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: bson.D{{Key: "status", Value: "cancelled"}}}}}},
	} {
		raw, err := bson.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		s.OnChange(raw)
	}
	if wakes != 4 || !slices.Equal(cancelled, []string{"gone"}) {
		t.Fatalf("wakes %d and cancelled %v, want 4 and [gone]", wakes, cancelled)
	}
}
