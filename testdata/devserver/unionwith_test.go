package main

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// One aggregate reads several collections: each union's pipeline runs on its own collection,
// and every document comes back in the one reply, tagged as its stage set it.
func TestUnionWithReadsEachCollectionInOneCommand(t *testing.T) {
	s := startServer(t, nil)
	ctx := context.Background()
	for coll, runAts := range map[string][]int{"a": {5, 1, 9}, "b": {7}, "c": {}} {
		c := s.db.Collection(coll)
		if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "seed"}, {Key: "run_at", Value: 100}}); err != nil {
			t.Fatal(err)
		}
		for i, at := range runAts {
			if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: coll + string(rune('0'+i))}, {Key: "run_at", Value: at}, {Key: "pending", Value: true}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	earliest := func(tag int) bson.A {
		return bson.A{
			bson.D{{Key: "$match", Value: bson.D{{Key: "pending", Value: true}}}},
			bson.D{{Key: "$sort", Value: bson.D{{Key: "run_at", Value: 1}}}},
			bson.D{{Key: "$limit", Value: 1}},
			bson.D{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "run_at", Value: 1}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "p", Value: tag}}}},
		}
	}
	pipeline := append(earliest(0),
		bson.D{{Key: "$unionWith", Value: bson.D{{Key: "coll", Value: "b"}, {Key: "pipeline", Value: earliest(1)}}}},
		bson.D{{Key: "$unionWith", Value: bson.D{{Key: "coll", Value: "c"}, {Key: "pipeline", Value: earliest(2)}}}},
		bson.D{{Key: "$unionWith", Value: "b"}},
	)
	before := s.front.reader.sent.Load()
	cur, err := s.db.Collection("a").Aggregate(ctx, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.M
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	type row struct{ p, runAt int32 }
	var rows []row
	for _, d := range got {
		p, _ := d["p"].(int32)
		at, _ := d["run_at"].(int32)
		rows = append(rows, row{p, at})
	}
	// a's earliest, b's earliest, nothing from c, then all of b.
	want := []row{{0, 1}, {1, 7}, {0, 100}, {0, 7}}
	if !slices.Equal(rows, want) {
		t.Fatalf("union read %v, want %v (p 0 with no tag is a whole document of b)", got, want)
	}
	if sent := s.front.reader.sent.Load() - before; sent != 4 {
		t.Errorf("the front sent the backend %d commands for 4 parts", sent)
	}
}

// A stage after a $unionWith is refused, naming it; nothing is read.
func TestUnionWithRefusesAStageAfterIt(t *testing.T) {
	s := startServer(t, nil)
	pipeline := bson.A{
		bson.D{{Key: "$unionWith", Value: "b"}},
		bson.D{{Key: "$sort", Value: bson.D{{Key: "x", Value: 1}}}},
	}
	_, err := s.db.Collection("a").Aggregate(context.Background(), pipeline)
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(codeNotImplemented) || !se.HasErrorMessage("$sort follows one") {
		t.Fatalf("a $sort after $unionWith: got %v, want NotImplemented naming $sort", err)
	}
}
