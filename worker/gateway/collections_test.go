package gateway_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// TestOnlyTaskCollectionsAreServed: the gateway neither reads nor writes a
// collection that is no task collection: an application's collection of
// other documents, and the worker registry. Every route on them answers
// 404 naming the collection, and nothing is written: the documents stay
// as they were, and no metadata or history collection appears beside them.
func TestOnlyTaskCollectionsAreServed(t *testing.T) {
	f := newFixture(t, nil)
	users := f.coll.Database().Collection(f.coll.Name() + "_users")
	t.Cleanup(func() {
		for _, name := range []string{users.Name(), users.Name() + ".meta", users.Name() + ".runs"} {
			_ = users.Database().Collection(name).Drop(context.Background())
		}
	})
	if _, err := users.InsertMany(t.Context(), []any{
		bson.D{{Key: "_id", Value: "u1"}, {Key: "name", Value: "ann"}, {Key: "status", Value: "active"}},
		bson.D{{Key: "_id", Value: "u2"}, {Key: "name", Value: "bob"}, {Key: "status", Value: "active"}},
	}); err != nil {
		t.Fatal(err)
	}
	before := allDocs(t, users)
	served := f.base
	for _, coll := range []string{users.Name(), mscheduler.WorkersCollection} {
		f.base = f.srv.URL + "/v1/collections/" + coll
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/tasks", nil},
			{"GET", "/tasks/u1", nil},
			{"POST", "/tasks/u1/cancel", map[string]any{}},
			{"POST", "/tasks", map[string]any{"key": "x"}},
			{"POST", "/take", map[string]any{"executor": "e", "max": 1, "wait_ms": 0}},
		} {
			code, body := f.call(c.method, c.path, "", c.body)
			if code != 404 || body["field"] != "collection" {
				t.Errorf("%s %s on %s: %d %v, want 404 about the collection", c.method, c.path, coll, code, body)
			}
		}
	}
	f.base = served
	if after := allDocs(t, users); !reflect.DeepEqual(after, before) {
		t.Errorf("documents changed:\nbefore %v\nafter  %v", before, after)
	}
	names, err := users.Database().ListCollectionNames(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, beside := range []string{users.Name() + ".meta", users.Name() + ".runs"} {
		if slices.Contains(names, beside) {
			t.Errorf("%s was created beside a collection that is no task collection", beside)
		}
	}
	f.publish(map[string]any{"key": "k"}) // the task collection it was given is still served
}

func allDocs(t *testing.T, coll *mongo.Collection) []bson.M {
	t.Helper()
	cur, err := coll.Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.M
	if err := cur.All(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
