package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func metaOf(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".meta")
}

// TestNewerSchemaIsRefused: a collection stamped by a newer library is
// refused by EnsureIndexes, a consumer's start, a publish and every edit, with an error
// naming both versions, and nothing is written.
func TestNewerSchemaIsRefused(t *testing.T) {
	coll := mschedulertest.Collection(t)
	meta := metaOf(coll)
	t.Cleanup(func() { _ = meta.Drop(context.Background()) })
	newer := mscheduler.SchemaVersion + 1
	if _, err := meta.InsertOne(ctxT(t), bson.D{{Key: "_id", Value: "schema"}, {Key: "version", Value: newer}}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		var se *mscheduler.SchemaError
		if !errors.Is(err, mscheduler.ErrSchema) || !errors.As(err, &se) || se.Found != newer || se.Supported != mscheduler.SchemaVersion ||
			!strings.Contains(err.Error(), fmt.Sprint(newer)) || !strings.Contains(err.Error(), fmt.Sprint(mscheduler.SchemaVersion)) {
			t.Fatalf("%s: err = %v, want a SchemaError naming versions %d and %d", what, err, newer, mscheduler.SchemaVersion)
		}
	}
	check("EnsureIndexes", mscheduler.EnsureIndexes(ctxT(t), coll))
	c, err := mscheduler.NewConsumer(coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", mschedulertest.NewEvents()))
	if err != nil {
		t.Fatal(err)
	}
	check("consumer Start", c.Start(ctxT(t)))
	p, err := mscheduler.NewProducer[int](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k"}, nil)
	check("Publish", err)
	check("Update", p.Update(ctxT(t), "k", mscheduler.TaskUpdate{Description: ptr("d")}))
	check("Pause", p.Pause(ctxT(t), "k"))
	check("Resume", p.Resume(ctxT(t), "k"))
	check("SkipNext", p.SkipNext(ctxT(t), "k", 1))
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("%d documents written to a newer collection", n)
	}
	names, err := coll.Database().ListCollectionNames(ctxT(t), bson.D{{Key: "name", Value: coll.Name()}})
	if err != nil || len(names) != 0 {
		t.Fatalf("collection created (%v, %v), want nothing written", names, err)
	}
}

// TestMigrationFromVersion1: a collection written by version 1 is migrated
// by 4 workers starting together, and a migration cut short (some documents
// stamped, no metadata) is finished by the next start; both end in the same
// documents.
func TestMigrationFromVersion1(t *testing.T) {
	coll := mschedulertest.Collection(t)
	meta := metaOf(coll)
	t.Cleanup(func() { _ = meta.Drop(context.Background()) })
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], 200)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("t%03d", i), Params: i}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	toVersion1 := func() {
		t.Helper()
		if _, err := coll.UpdateMany(ctxT(t), bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "schema", Value: 1}}}}); err != nil {
			t.Fatal(err)
		}
		if err := meta.Drop(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	migrateTogether := func(workers int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- mscheduler.EnsureIndexes(ctxT(t), mschedulertest.CollectionOf(t, mschedulertest.NewClient(t)).Database().Collection(coll.Name()))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("migration: %v", err)
			}
		}
	}
	snapshot := func() []bson.M {
		t.Helper()
		if n := countDocs(t, coll, bson.D{{Key: "schema", Value: bson.D{{Key: "$ne", Value: mscheduler.SchemaVersion}}}}); n != 0 {
			t.Fatalf("%d documents not at version %d", n, mscheduler.SchemaVersion)
		}
		var m struct {
			Version int `bson:"version"`
		}
		if err := meta.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "schema"}}).Decode(&m); err != nil || m.Version != mscheduler.SchemaVersion {
			t.Fatalf("metadata version %d (%v), want %d", m.Version, err, mscheduler.SchemaVersion)
		}
		cur, err := coll.Find(ctxT(t), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.M
		if err := cur.All(ctxT(t), &docs); err != nil {
			t.Fatal(err)
		}
		return docs
	}

	toVersion1()
	migrateTogether(4)
	together := snapshot()

	toVersion1()
	// Cut short: the first half stamped, the metadata never written.
	if _, err := coll.UpdateMany(ctxT(t), bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: "t100"}}}}, bson.D{{Key: "$set", Value: bson.D{{Key: "schema", Value: mscheduler.SchemaVersion}}}}); err != nil {
		t.Fatal(err)
	}
	migrateTogether(1)
	if again := snapshot(); !reflect.DeepEqual(again, together) {
		t.Fatalf("a migration finished after being cut short differs from one run in one go")
	}
	// A consumer starts on the migrated collection and runs its tasks.
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
}

// TestProducerChecksTheSchemaAgain: a producer that checked the schema
// version at its first publish checks it again once SchemaCheckInterval has
// passed, so that it refuses a collection a newer worker migrated since,
// instead of writing the old layout into it for ever.
func TestProducerChecksTheSchemaAgain(t *testing.T) {
	coll := mschedulertest.Collection(t)
	meta := metaOf(coll)
	t.Cleanup(func() { _ = meta.Drop(context.Background()) })
	clock := &jumpClock{}
	cfg := clock.producer()
	cfg.SchemaCheckInterval = time.Minute
	p := newProducer[int](t, coll, cfg)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "before"}, nil); err != nil {
		t.Fatal(err)
	}
	newer := mscheduler.SchemaVersion + 1
	if _, err := meta.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "schema"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: newer}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "within"}, nil); err != nil {
		t.Fatalf("publish within the interval: %v (the check is cached for it)", err)
	}
	clock.set(2 * time.Minute)
	_, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "after"}, nil)
	var se *mscheduler.SchemaError
	if !errors.As(err, &se) || se.Found != newer {
		t.Fatalf("publish after the interval: %v, want a SchemaError naming version %d", err, newer)
	}
	if n := countDocs(t, coll, bson.D{{Key: "_id", Value: "after"}}); n != 0 {
		t.Fatal("the refused publish wrote its task")
	}
}
