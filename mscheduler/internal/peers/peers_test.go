package peers

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestCountPeersRanks: a consumer's rank is how many consumers alive have
// a worker id before its own; lapsed ones and values not dates do not
// count, and are returned as gone.
func TestCountPeersRanks(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	raw, err := bson.Marshal(bson.D{{Key: "seen", Value: bson.D{
		{Key: "c", Value: now}, {Key: "a", Value: now.Add(-time.Second)}, {Key: "e", Value: now},
		{Key: "b", Value: now.Add(-time.Hour)}, {Key: "d", Value: "yesterday"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	alive := Window{From: now.Add(-time.Minute), To: now.Add(time.Minute)}
	for self, want := range map[string]int{"a": 0, "c": 1, "e": 2, "zz": 3} {
		view := CountPeers(raw, alive, self)
		if view.Alive != 3 || view.Rank != want || fmt.Sprint(view.Gone) != "[b d]" {
			t.Errorf("as %s: alive %d, rank %d, gone %v; want 3, %d, [b d]", self, view.Alive, view.Rank, view.Gone, want)
		}
	}
}
