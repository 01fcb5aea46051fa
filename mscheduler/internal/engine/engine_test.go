package engine_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// rawFront is a front end of the engine that is not the typed layer: it
// hands each claimed task's params to its handler as stored, and stores
// what the handler returns as the result, as the HTTP gateway's executors
// see them.
type rawFront struct {
	mu     sync.Mutex
	params map[string]bson.RawValue // by key, as the handler got them
}

func (f *rawFront) prepare(doc *stored.Task, run *engine.Run) (engine.CallFunc, error) {
	return func(context.Context) (bson.RawValue, error) {
		f.mu.Lock()
		f.params[doc.Key] = doc.Params
		f.mu.Unlock()
		return stringValue("done by " + run.WorkerID), nil
	}, nil
}

// stringValue is s as a BSON value.
func stringValue(s string) bson.RawValue {
	t, v, err := bson.MarshalValue(s)
	if err != nil {
		panic(err)
	}
	return bson.RawValue{Type: t, Value: v}
}

// plainDocuments is what a front end that knows no plans and no schema
// migration tells the engine of task documents: the stored layout's own
// gate, no plan.
var plainDocuments = engine.Documents{
	Inspect:      stored.DecodeTask,
	Advance:      func(*stored.Task, time.Time, time.Time) *taskstate.Advance { return nil },
	FirstStart:   func(*stored.Task, time.Time) (taskstate.Step, bool) { return taskstate.Step{}, false },
	EnsureSchema: func(context.Context, *mongo.Collection, *slog.Logger) error { return nil },
}

func config(workerID string, prepare engine.PrepareFunc, onEvent func(engine.Event)) *engine.Config {
	return &engine.Config{
		WorkerID: workerID, Capacity: 4, Timeout: time.Minute, Logger: slog.New(slog.DiscardHandler), OnEvent: onEvent,
		Discovery: engine.DiscoveryPoll, PollInterval: 100 * time.Millisecond, ChangeStreamPollInterval: time.Second,
		SweepInterval: time.Second, PollBudget: 2, ClaimBatchMax: 64, ClaimSpareFor: 10 * time.Second,
		PingBatchMax: 64, EndBatchMax: 64, EndBatchWindow: 5 * time.Millisecond, ReleaseTimeout: time.Second,
		TimeoutGrace: time.Second, WriteTimeout: 10 * time.Second, RunsKept: 20, MaxResultBytes: 1 << 16, MaxErrorBytes: 1 << 10,
		MaintenanceInterval: time.Minute, CheckInterval: time.Minute, WriteConcern: writeconcern.Majority(),
		Clock: time.Now, ClockSyncInterval: time.Minute,
		Prepare: prepare, Documents: plainDocuments,
	}
}

// TestEngineServesARawFrontEnd: the engine claims, runs and ends tasks for
// a front end of its own, params handed over as stored and results stored
// as returned, with no typed layer in between.
func TestEngineServesARawFrontEnd(t *testing.T) {
	ctx := t.Context()
	coll := mschedulertest.Collection(t)
	p, err := mscheduler.NewProducer[bson.M](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for i, key := range keys {
		if _, err := p.Publish(ctx, mscheduler.Task[bson.M]{Key: key, Params: bson.M{"n": i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	front := &rawFront{params: map[string]bson.RawValue{}}
	ended := make(chan string, len(keys))
	e := engine.New(coll, config("raw-1", front.prepare, func(ev engine.Event) {
		if ev.Kind == engine.EventSucceeded {
			ended <- ev.Key
		}
	}))
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for range keys {
		select {
		case <-ended:
		case <-time.After(time.Minute):
			t.Fatal("not every task succeeded within a minute")
		}
	}
	for i, key := range keys {
		front.mu.Lock()
		got := front.params[key]
		front.mu.Unlock()
		var params bson.M
		if err := got.Unmarshal(&params); err != nil {
			t.Fatalf("%s: params as the handler got them: %v", key, err)
		}
		if n, _ := params["n"].(int32); int(n) != i {
			t.Errorf("%s: params %v, want n %d", key, params, i)
		}
		info, err := p.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != mscheduler.StatusSucceeded {
			t.Errorf("%s: status %s, want succeeded", key, info.Status)
		}
		run, ok := info.LastRun()
		if !ok {
			t.Fatalf("%s: no run recorded", key)
		}
		if result, err := mscheduler.ResultAs[string](run); err != nil || result != "done by raw-1" {
			t.Errorf("%s: result %q (%v), want the handler's", key, result, err)
		}
	}
}
