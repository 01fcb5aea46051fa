package mscheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

type email struct {
	To      string `bson:"to"`
	Subject string `bson:"subject"`
}

func TestPublishIsIdempotentByKey(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[email](t, coll, nil)
	ctx := ctxT(t)

	res, err := p.Publish(ctx, mscheduler.Task[email]{Key: "k1", Params: email{To: "a@x"}}, nil)
	if err != nil || res.Outcome != mscheduler.PublishInserted {
		t.Fatalf("first publish: %+v, %v", res, err)
	}
	res, err = p.Publish(ctx, mscheduler.Task[email]{Key: "k1", Params: email{To: "b@x"}}, nil)
	if err != nil || res.Outcome != mscheduler.PublishUnchanged {
		t.Fatalf("second publish: %+v, %v", res, err)
	}
	if n := countDocs(t, coll, bson.D{}); n != 1 {
		t.Fatalf("documents = %d, want 1", n)
	}
	var params email
	if err := readTask(t, coll, "k1").Params.Unmarshal(&params); err != nil || params.To != "a@x" {
		t.Fatalf("params = %+v (%v), want the first publish's", params, err)
	}
}

func TestPublishStoresDefaultsAndSchema(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[email](t, coll, &mscheduler.ProducerConfig{Defaults: mscheduler.TaskDefaults{Source: "billing"}})
	if _, err := p.Publish(ctxT(t), mscheduler.Task[email]{Key: "k", Priority: 3, Tags: []string{"mail"}}, nil); err != nil {
		t.Fatal(err)
	}
	doc := mschedulertest.Doc(t, coll, "k")
	want := map[string]any{
		"status": "pending", "priority": int32(3), "concurrency": int32(1), "free": int32(1),
		"ping_interval_ms": int64(10000), "worker_timeout_ms": int64(30000), "max_retries": int32(2),
		"retry_delay_ms": int64(1000), "max_failed_runs": int32(3), "schema": int32(mscheduler.SchemaVersion), "source": "billing",
	}
	for field, v := range want {
		if got := doc[field]; got != v {
			t.Errorf("%s = %#v (%T), want %#v", field, got, got, v)
		}
	}
	if _, ok := doc["run_at"].(bson.DateTime); !ok {
		t.Errorf("run_at = %#v, want a date", doc["run_at"])
	}
}

func TestPublishOptions(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[email](t, coll, nil)
	ctx := ctxT(t)
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := p.Publish(ctx, mscheduler.Task[email]{Key: "k", Params: email{To: "old"}}, nil); err != nil {
		t.Fatal(err)
	}

	res, err := p.Publish(ctx, mscheduler.Task[email]{Key: "k", Params: email{To: "new"}}, &mscheduler.PublishOpts{UpdateParams: true})
	if err != nil || res.Outcome != mscheduler.PublishUpdated {
		t.Fatalf("UpdateParams: %+v, %v", res, err)
	}
	var params email
	_ = readTask(t, coll, "k").Params.Unmarshal(&params)
	if params.To != "new" {
		t.Fatalf("params.To = %q, want new", params.To)
	}

	res, err = p.Publish(ctx, mscheduler.Task[email]{Key: "k", RunAt: later}, &mscheduler.PublishOpts{MoveRunAt: true})
	if err != nil || res.Outcome != mscheduler.PublishUpdated {
		t.Fatalf("MoveRunAt: %+v, %v", res, err)
	}
	if got := readTask(t, coll, "k").RunAt; !got.Equal(later) {
		t.Fatalf("run_at = %v, want %v", got, later)
	}

	// A task with a run going is left alone with SkipRunning.
	setFields(t, coll, "k", bson.D{{Key: "running", Value: 1}, {Key: "status", Value: "running"}})
	res, err = p.Publish(ctx, mscheduler.Task[email]{Key: "k", Params: email{To: "skipped"}}, &mscheduler.PublishOpts{UpdateParams: true, SkipRunning: true})
	if err != nil || res.Outcome != mscheduler.PublishUnchanged {
		t.Fatalf("SkipRunning: %+v, %v", res, err)
	}
	_ = readTask(t, coll, "k").Params.Unmarshal(&params)
	if params.To != "new" {
		t.Fatalf("params.To = %q after SkipRunning, want new", params.To)
	}

	// ResetFinished makes a finished task run again, with the new params.
	setFields(t, coll, "k", bson.D{{Key: "running", Value: 0}, {Key: "status", Value: "succeeded"}, {Key: "succeeded", Value: 1}, {Key: "free", Value: 0}})
	res, err = p.Publish(ctx, mscheduler.Task[email]{Key: "k", Params: email{To: "again"}}, &mscheduler.PublishOpts{ResetFinished: true})
	if err != nil || res.Outcome != mscheduler.PublishUpdated {
		t.Fatalf("ResetFinished: %+v, %v", res, err)
	}
	st := readTask(t, coll, "k")
	_ = st.Params.Unmarshal(&params)
	if st.Status != "pending" || st.Free != 1 || st.Succeeded != 0 || params.To != "again" {
		t.Fatalf("after reset: %+v params %+v", st, params)
	}
	// ResetFinished leaves a pending task alone.
	res, err = p.Publish(ctx, mscheduler.Task[email]{Key: "k", Params: email{To: "no"}}, &mscheduler.PublishOpts{ResetFinished: true})
	if err != nil || res.Outcome != mscheduler.PublishUnchanged {
		t.Fatalf("ResetFinished on pending: %+v, %v", res, err)
	}
}

func TestPublishManyMixedKeys(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[email](t, coll, nil)
	ctx := ctxT(t)
	if _, err := p.PublishMany(ctx, []mscheduler.Task[email]{{Key: "a"}, {Key: "b"}}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := p.PublishMany(ctx, []mscheduler.Task[email]{{Key: "b", Params: email{To: "x"}}, {Key: "c"}, {Key: "a"}, {Key: "d"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []mscheduler.PublishResult{
		{Key: "b", Outcome: mscheduler.PublishUnchanged},
		{Key: "c", Outcome: mscheduler.PublishInserted},
		{Key: "a", Outcome: mscheduler.PublishUnchanged},
		{Key: "d", Outcome: mscheduler.PublishInserted},
	}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("result[%d] = %+v, want %+v", i, res[i], want[i])
		}
	}
	res, err = p.PublishMany(ctx, []mscheduler.Task[email]{{Key: "a", Params: email{To: "y"}}, {Key: "e"}}, &mscheduler.PublishOpts{UpdateParams: true})
	if err != nil || res[0].Outcome != mscheduler.PublishUpdated || res[1].Outcome != mscheduler.PublishInserted {
		t.Fatalf("bulk update: %+v, %v", res, err)
	}
	if n := countDocs(t, coll, bson.D{}); n != 5 {
		t.Fatalf("documents = %d, want 5", n)
	}
}

func TestPublishRefusesBadInputAndWritesNothing(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[any](t, coll, nil)
	ctx := ctxT(t)
	cases := []struct {
		name  string
		task  mscheduler.Task[any]
		field string
	}{
		{"empty key", mscheduler.Task[any]{}, "Key"},
		{"long key", mscheduler.Task[any]{Key: strings.Repeat("k", 1025)}, "Key"},
		{"negative concurrency", mscheduler.Task[any]{Key: "k", Concurrency: -1}, "Concurrency"},
		{"ping not below timeout", mscheduler.Task[any]{Key: "k", PingInterval: time.Minute, WorkerTimeout: time.Minute}, "PingInterval"},
		{"params that do not encode", mscheduler.Task[any]{Key: "k", Params: make(chan int)}, "Params"},
		{"bad worker id", mscheduler.Task[any]{Key: "k", WorkerIDs: []string{"host.example"}}, "WorkerIDs[0]"},
		{"max retries below -1", mscheduler.Task[any]{Key: "k", MaxRetries: -2}, "MaxRetries"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Publish(ctx, c.task, nil)
			var ie *mscheduler.InvalidError
			if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, mscheduler.ErrInvalid) {
				t.Fatalf("err = %v, want an InvalidError on %s", err, c.field)
			}
		})
	}
	// One bad task in a batch refuses the whole batch, naming it.
	_, err := p.PublishMany(ctx, []mscheduler.Task[any]{{Key: "ok"}, {Key: "ok2", Concurrency: -3}}, nil)
	var ie *mscheduler.InvalidError
	if !errors.As(err, &ie) || ie.Field != "tasks[1].Concurrency" {
		t.Fatalf("batch err = %v, want tasks[1].Concurrency", err)
	}
	_, err = p.PublishMany(ctx, []mscheduler.Task[any]{{Key: "same"}, {Key: "same"}}, nil)
	if !errors.As(err, &ie) || ie.Field != "tasks[1].Key" {
		t.Fatalf("duplicate key err = %v, want tasks[1].Key", err)
	}
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("documents = %d after refused publishes, want 0", n)
	}
}

func TestProducerConfigRefusesBadDefaults(t *testing.T) {
	coll := mschedulertest.Collection(t)
	_, err := mscheduler.NewProducer[any](coll, &mscheduler.ProducerConfig{Defaults: mscheduler.TaskDefaults{
		PingInterval: time.Minute, WorkerTimeout: time.Second,
	}})
	var ie *mscheduler.InvalidError
	if !errors.As(err, &ie) || ie.Field != "Defaults.PingInterval" {
		t.Fatalf("err = %v, want Defaults.PingInterval", err)
	}
}

// TestEnsureIndexesIsIdempotent: EnsureIndexes creates every index the
// queries need, again and again, and drops the one an earlier version
// created that stands in the way of sharding. Once they are there, a call
// creates none: it lists them and is done.
func TestEnsureIndexesIsIdempotent(t *testing.T) {
	var creates atomic.Int64
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "createIndexes" {
			creates.Add(1)
		}
	}}))
	coll := dbCollection(client, mschedulertest.Collection(t))
	retired := mongo.IndexModel{Keys: bson.D{{Key: "key", Value: 1}}, Options: options.Index().SetName("key_unique").SetUnique(true)}
	if _, err := coll.Indexes().CreateOne(ctxT(t), retired); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		before := creates.Load()
		if err := mscheduler.EnsureIndexes(ctxT(t), coll); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if n := creates.Load() - before; i == 0 && n == 0 || i > 0 && n != 0 {
			t.Errorf("call %d sent %d createIndexes; want some on the first call, none after", i+1, n)
		}
	}
	cur, err := coll.Indexes().List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var idx []bson.M
	if err := cur.All(ctxT(t), &idx); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, i := range idx {
		names[i["name"].(string)] = true
	}
	for _, want := range []string{"claim", "due", "next_expiry", "tags"} {
		if !names[want] {
			t.Errorf("index %s missing; have %v", want, names)
		}
	}
	if names["key_unique"] {
		t.Errorf("retired index key_unique still there; have %v", names)
	}
}

// TestPublishUpdatesPastAHandEditedRev: replacing params in bulk is not
// stopped by a task whose rev was edited by hand into a string: every
// task gets its new params, and the call succeeds.
func TestPublishUpdatesPastAHandEditedRev(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	keys := []string{"a", "b", "c"}
	tasks := make([]mscheduler.Task[int], len(keys))
	for i, key := range keys {
		tasks[i] = mscheduler.Task[int]{Key: key, Params: 1}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "rev", Value: "r"}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range tasks {
		tasks[i].Params = 2
	}
	if _, err := p.PublishMany(ctxT(t), tasks, &mscheduler.PublishOpts{UpdateParams: true}); err != nil {
		t.Fatalf("PublishMany with UpdateParams: %v", err)
	}
	for _, key := range keys {
		var doc struct {
			Params int `bson:"params"`
		}
		if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if doc.Params != 2 {
			t.Errorf("%s has params %d, want 2", key, doc.Params)
		}
	}
}
