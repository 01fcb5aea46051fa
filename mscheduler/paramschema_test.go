package mscheduler_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

type mailParams struct {
	To    string `bson:"to"`
	Tries int    `bson:"tries,omitempty"`
}

const mailSchema = `{"type": "object", "required": ["to"],
  "properties": {"to": {"type": "string", "pattern": "@"}, "tries": {"type": "integer", "maximum": 5}}}`

// The params schema is the door: a publish whose params it refuses names
// the task and the field, and writes nothing; PublishMany refuses the
// whole batch; removing the schema opens the door again.
func TestParamsSchemaRefusesAtTheDoor(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	if err := mscheduler.SetParamsSchema(ctx, coll, []byte(mailSchema)); err != nil {
		t.Fatal(err)
	}
	if got, err := mscheduler.ParamsSchema(ctx, coll); err != nil || string(got) != mailSchema {
		t.Fatalf("ParamsSchema = %q, %v; want the schema set", got, err)
	}
	p := newProducer[mailParams](t, coll, nil)
	if _, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "ok", Params: mailParams{To: "ada@example.com", Tries: 2}}, nil); err != nil {
		t.Fatalf("valid params refused: %v", err)
	}
	_, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "bad", Params: mailParams{To: "ada"}}, nil)
	wantInvalid(t, err, "Params")
	if !strings.Contains(err.Error(), "at '/to'") {
		t.Errorf("the refusal does not name the field: %v", err)
	}
	_, err = p.PublishMany(ctx, []mscheduler.Task[mailParams]{
		{Key: "many-0", Params: mailParams{To: "bob@example.com"}},
		{Key: "many-1", Params: mailParams{To: "eve@example.com", Tries: 9}},
	}, nil)
	wantInvalid(t, err, "tasks[1].Params")
	if !strings.Contains(err.Error(), "at '/tries'") {
		t.Errorf("the refusal does not name the field: %v", err)
	}
	if n := countDocs(t, coll, bson.D{}); n != 1 {
		t.Fatalf("%d tasks stored; want only the valid one", n)
	}
	// Params a publish does not store are not held against it: moving an
	// existing task's run_at (as a reschedule does, params left empty) is
	// not refused; replacing its params with the same is.
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "ok", RunAt: later}, &mscheduler.PublishOpts{MoveRunAt: true}); err != nil {
		t.Fatalf("a reschedule of an existing task was refused for params it does not write: %v", err)
	}
	_, err = p.Publish(ctx, mscheduler.Task[mailParams]{Key: "ok", RunAt: later}, &mscheduler.PublishOpts{UpdateParams: true})
	wantInvalid(t, err, "Params")
	if st := readTask(t, coll, "ok"); !st.RunAt.Equal(later) {
		t.Errorf("the reschedule did not move run_at: %s, want %s", st.RunAt, later)
	}

	if err := mscheduler.SetParamsSchema(ctx, coll, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := mscheduler.ParamsSchema(ctx, coll); err != nil || got != nil {
		t.Fatalf("after removal: %q, %v", got, err)
	}
	fresh := newProducer[mailParams](t, coll, nil)
	if _, err := fresh.Publish(ctx, mscheduler.Task[mailParams]{Key: "bad", Params: mailParams{To: "ada"}}, nil); err != nil {
		t.Fatalf("without a schema: %v", err)
	}
}

// A running producer obeys a schema set after its first publish once it
// checks the collection again, SchemaCheckInterval later by its monotonic
// clock (here the test's).
func TestParamsSchemaReachesRunningProducers(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	var mono atomic.Int64
	mono.Store(int64(time.Hour))
	p := newProducer[mailParams](t, coll, &mscheduler.ProducerConfig{
		SchemaCheckInterval: time.Minute, Monotonic: func() time.Duration { return time.Duration(mono.Load()) }})
	if _, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "before", Params: mailParams{To: "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := mscheduler.SetParamsSchema(ctx, coll, []byte(mailSchema)); err != nil {
		t.Fatal(err)
	}
	mono.Add(int64(30 * time.Second))
	if _, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "within", Params: mailParams{To: "x"}}, nil); err != nil {
		t.Fatalf("within SchemaCheckInterval the producer trusts its last check; got %v", err)
	}
	mono.Add(int64(31 * time.Second))
	_, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "after", Params: mailParams{To: "x"}}, nil)
	wantInvalid(t, err, "Params")
}

// A schema that does not compile is refused, naming it, and nothing is
// stored; one broken by hand in the collection refuses publishes, saying
// where it is, rather than letting every params through.
func TestParamsSchemaBrokenOrRefused(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	ctx := ctxT(t)
	wantInvalid(t, mscheduler.SetParamsSchema(ctx, coll, []byte(`{"type": "strang"}`)), "schema")
	if got, err := mscheduler.ParamsSchema(ctx, coll); err != nil || got != nil {
		t.Fatalf("a refused schema was stored: %q, %v", got, err)
	}
	meta := coll.Database().Collection(coll.Name() + ".meta")
	if _, err := meta.InsertOne(ctx, bson.D{{Key: "_id", Value: "params_schema"}, {Key: "json", Value: `{"type": 5}`}}); err != nil {
		t.Fatal(err)
	}
	p := newProducer[mailParams](t, coll, nil)
	_, err := p.Publish(ctx, mscheduler.Task[mailParams]{Key: "any", Params: mailParams{To: "ada@example.com"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `_id "params_schema"`) || !strings.Contains(err.Error(), ".meta") {
		t.Fatalf("publish under a broken schema: %v; want a refusal saying where the schema is", err)
	}
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("%d tasks stored under a broken schema", n)
	}
}
