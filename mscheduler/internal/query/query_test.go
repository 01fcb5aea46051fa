package query_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// TestDeleteAllInBoundedBatches: deletes go a batch at a time, stopping at
// the number of batches asked, each fenced on the filter.
func TestDeleteAllInBoundedBatches(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	docs := make([]any, 0, query.DeleteBatch+10)
	for i := range query.DeleteBatch + 10 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("d%04d", i)}, {Key: "gone", Value: i%2 == 0}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	filter := bson.D{{Key: "gone", Value: true}}
	n, err := query.DeleteAll(ctx, coll, filter, 1)
	if err != nil || n != int64((query.DeleteBatch+10)/2) {
		t.Fatalf("DeleteAll = %d, %v; want the %d that match, in one batch", n, err, (query.DeleteBatch+10)/2)
	}
	if left, _ := coll.CountDocuments(ctx, bson.D{}); left != int64((query.DeleteBatch+10)/2) {
		t.Fatalf("%d left, want the ones that do not match", left)
	}
}

// TestDuplicateIndexesNamesTheOpsThatFoundTheirKey: an unordered insert of
// keys some of which exist fails on those only, and says which.
func TestDuplicateIndexesNamesTheOpsThatFoundTheirKey(t *testing.T) {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	_, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "_id", Value: "c"}}},
		options.InsertMany().SetOrdered(false))
	dups, err := query.DuplicateIndexes(err)
	if err != nil || len(dups) != 1 || !dups[1] {
		t.Fatalf("DuplicateIndexes = %v, %v; want op 1 only", dups, err)
	}
	if dups, err := query.DuplicateIndexes(nil); err != nil || dups != nil {
		t.Fatalf("no error: %v, %v", dups, err)
	}
}
