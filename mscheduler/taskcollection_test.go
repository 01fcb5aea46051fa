package mscheduler_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestACollectionOfOtherDocumentsIsRefusedUntouched: on a collection that
// holds documents but no mark of a task collection (someone's users), a
// consumer's start, EnsureIndexes, a publish, every action and the params
// schema are refused with an error naming the collection and how to adopt
// it, and nothing is written: its documents stay as they were, and no
// index, metadata or history collection appears beside it. Once adopted,
// it is served.
func TestACollectionOfOtherDocumentsIsRefusedUntouched(t *testing.T) {
	coll := mschedulertest.Collection(t)
	users := []any{
		bson.D{{Key: "_id", Value: "u1"}, {Key: "name", Value: "ann"}, {Key: "status", Value: "active"}},
		bson.D{{Key: "_id", Value: "u2"}, {Key: "name", Value: "bob"}, {Key: "status", Value: "active"}, {Key: "schema", Value: "v7"}},
	}
	if _, err := coll.InsertMany(ctxT(t), users); err != nil {
		t.Fatal(err)
	}
	before := allRaw(t, coll)
	check := func(what string, err error) {
		t.Helper()
		var nt *mscheduler.NotTaskCollectionError
		if !errors.Is(err, mscheduler.ErrNotTaskCollection) || !errors.As(err, &nt) || nt.Collection != coll.Name() ||
			!strings.Contains(err.Error(), coll.Name()) || !strings.Contains(err.Error(), "migrate --adopt") {
			t.Errorf("%s: err = %v, want a NotTaskCollectionError naming %s and how to adopt it", what, err, coll.Name())
		}
	}
	check("EnsureIndexes", mscheduler.EnsureIndexes(ctxT(t), coll))
	c, err := mscheduler.NewConsumer(coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", mschedulertest.NewEvents()))
	if err != nil {
		t.Fatal(err)
	}
	check("consumer Start", c.Start(ctxT(t)))
	p := plainProducer(t, coll)
	_, err = p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil)
	check("Publish", err)
	check("Cancel", p.Cancel(ctxT(t), "u1"))
	check("Update", p.Update(ctxT(t), "u1", mscheduler.TaskUpdate{Description: ptr("d")}))
	check("Pause", p.Pause(ctxT(t), "u1"))
	_, err = p.DeleteFinished(ctxT(t), 0)
	check("DeleteFinished", err)
	check("SetParamsSchema", mscheduler.SetParamsSchema(ctxT(t), coll, []byte(`{"type":"object"}`)))

	if after := allRaw(t, coll); !reflect.DeepEqual(after, before) {
		t.Errorf("documents changed:\nbefore %v\nafter  %v", before, after)
	}
	names, err := coll.Database().ListCollectionNames(ctxT(t), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, beside := range []string{coll.Name() + ".meta", coll.Name() + ".runs"} {
		if slices.Contains(names, beside) {
			t.Errorf("%s was created beside a collection that is no task collection", beside)
		}
	}
	specs, err := coll.Indexes().ListSpecifications(ctxT(t))
	if err != nil || len(specs) != 1 {
		t.Errorf("indexes: %d (%v), want only _id's", len(specs), err)
	}

	if err := mscheduler.Adopt(ctxT(t), coll); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
		t.Fatalf("Publish after Adopt: %v", err)
	}
}

// TestCollectionsTheLibraryKeepsAreNeverTaskCollections: the worker
// registry and a task collection's metadata and history are refused by
// name, empty or not, by EnsureIndexes, a publish and Adopt, and none of
// them is created.
func TestCollectionsTheLibraryKeepsAreNeverTaskCollections(t *testing.T) {
	base := mschedulertest.Collection(t)
	db := base.Database()
	for _, name := range []string{mscheduler.WorkersCollection, base.Name() + ".meta", base.Name() + ".runs", "system.views"} {
		coll := db.Collection(name)
		existed := collectionExists(t, db, name)
		check := func(what string, err error) {
			t.Helper()
			var nt *mscheduler.NotTaskCollectionError
			if !errors.As(err, &nt) || nt.Collection != name || nt.Adoptable || strings.Contains(err.Error(), "adopt") {
				t.Errorf("%s on %s: err = %v, want a NotTaskCollectionError that offers no adoption", what, name, err)
			}
		}
		check("EnsureIndexes", mscheduler.EnsureIndexes(ctxT(t), coll))
		check("Adopt", mscheduler.Adopt(ctxT(t), coll))
		_, err := plainProducer(t, coll).Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil)
		check("Publish", err)
		if !existed && collectionExists(t, db, name) {
			t.Errorf("%s was created", name)
		}
	}
}

// TestAnEmptyCollectionBecomesATaskCollection: a collection created empty
// by someone (or not there at all) is no one's yet: a publish marks it and
// stores the task, as before.
func TestAnEmptyCollectionBecomesATaskCollection(t *testing.T) {
	coll := mschedulertest.Collection(t)
	if err := coll.Database().CreateCollection(ctxT(t), coll.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := plainProducer(t, coll).Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil); err != nil {
		t.Fatalf("Publish into an empty collection: %v", err)
	}
	if n := countDocs(t, metaOf(coll), bson.D{{Key: "_id", Value: "schema"}}); n != 1 {
		t.Errorf("schema documents after the first publish: %d, want 1", n)
	}
}

// plainProducer is a producer of coll, without the indexes newProducer
// ensures first: the publish itself meets the collection.
func plainProducer(t *testing.T, coll *mongo.Collection) *mscheduler.Producer[int] {
	t.Helper()
	p, err := mscheduler.NewProducer[int](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func allRaw(t *testing.T, coll *mongo.Collection) []bson.Raw {
	t.Helper()
	cur, err := coll.Find(ctxT(t), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.Raw
	if err := cur.All(ctxT(t), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func collectionExists(t *testing.T, db *mongo.Database, name string) bool {
	t.Helper()
	names, err := db.ListCollectionNames(ctxT(t), bson.D{{Key: "name", Value: name}})
	if err != nil {
		t.Fatal(err)
	}
	return len(names) > 0
}
