package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// TestPanicShowsItsStack: a run whose handler panicked shows the panic in
// the history, and its stack on demand.
func TestPanicShowsItsStack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	ctx := t.Context()
	if _, err := f.producer.Publish(ctx, mscheduler.Task[email]{Key: "panics-1", Params: email{To: "x@example.com"},
		MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := mscheduler.NewConsumer(f.coll, func(_ context.Context, task *mscheduler.Task[email]) (string, error) {
		if task.Key == "panics-1" {
			var m map[string]int
			m["boom"]++ // a nil map: the handler panics
		}
		return "ok", nil
	}, &mscheduler.ConsumerConfig{WorkerID: "panicky-" + f.coll.Name(), PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ti, err := f.producer.Wait(ctx, "panics-1"); err != nil || ti.Status != mscheduler.StatusFailed {
		t.Fatalf("the panicking task ended %v, %v; want failed", ti, err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	p := f.get(f.taskPath("panics-1"))
	p.want(t, "panicked task", 200, "<details><summary>handler panic: assignment to entry in nil map</summary>", "goroutine ", "TestPanicShowsItsStack")
	// A one-line error is shown whole, with no stack to open.
	broken := f.get(f.taskPath("broken-1"))
	broken.want(t, "failed task", 200, "<pre>no recipient</pre>")
	if strings.Contains(broken.body, "<details>") {
		t.Error("a one-line error is folded as if it had a stack")
	}
}

// TestOverviewAndKinds: the overview shows the queue depth, and the task
// list picks its kind (the collection) from the ones shown.
func TestOverviewAndKinds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	c := f.coll.Name()
	f.get("").want(t, "overview", 200, "queue depth (due now)")
	f.get("tasks?c="+c).want(t, "tasks", 200, `<select name="c">`, "<option selected>"+c+"</option>")
}

// TestHandEditedRecordsShowTheirProblem: a run record or a worker record
// edited by hand into the wrong shape is shown with what is wrong with it,
// beside the sound ones, instead of failing the page.
func TestHandEditedRecordsShowTheirProblem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	ctx := t.Context()
	history := f.coll.Database().Collection(f.coll.Name() + ".runs")
	if _, err := history.InsertOne(ctx, bson.D{{Key: "_id", Value: "edited-run"}, {Key: "key", Value: "broken-1"},
		{Key: "run_id", Value: "edited-run"}, {Key: "outcome", Value: 5}, {Key: "finished", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	workers := f.coll.Database().Collection(mscheduler.WorkersCollection)
	id := "edited-worker-" + f.coll.Name()
	if _, err := workers.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "pid", Value: "abc"}, {Key: "last_seen", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = workers.DeleteOne(context.Background(), bson.D{{Key: "_id", Value: id}}) })
	f.get(f.taskPath("broken-1")).want(t, "task with an edited run record", 200,
		"record cannot be read as stored: field outcome", "no recipient")
	sound := "sound-worker-" + f.coll.Name()
	if err := mscheduler.Heartbeat(ctx, f.coll.Database(), mscheduler.WorkerInfo{ID: sound, Host: "h", PID: 42, HeartbeatMS: 10_000}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), sound) })
	f.get("workers").want(t, "workers with an edited record", 200, id, "Its record cannot be read as stored: field pid", sound)
}

// TestSlowQueryShowsAMessage: a query that runs out of QueryTimeout shows
// a page asking to narrow the filter, not a server error.
func TestSlowQueryShowsAMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	d, err := dashboard.New(f.coll.Database(), &dashboard.Config{Collections: []string{f.coll.Name()}, QueryTimeout: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/tasks?c=" + f.coll.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "took longer than 1µs and was stopped: narrow the filter") {
		t.Errorf("status %d, body:\n%.2000s", resp.StatusCode, body)
	}
}

// TestWorkersPageReadsTheHistoryOnce: the workers page reads the recent
// runs of every worker listed with one read of the history, not one per
// worker, and still shows each worker's runs.
func TestWorkersPageReadsTheHistoryOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	ctx := t.Context()
	ids := []string{workerOf(f.coll)}
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("idle-%d-%s", i, f.coll.Name()))
	}
	for _, id := range ids {
		if err := mscheduler.Heartbeat(ctx, f.coll.Database(), mscheduler.WorkerInfo{ID: id, Host: "h", PID: 42, HeartbeatMS: 10_000}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), id) })
	}
	history := f.coll.Name() + ".runs"
	var reads atomic.Int64
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" && e.Command.Lookup("find").StringValue() == history {
			reads.Add(1)
		}
	}}))
	d, err := dashboard.New(client.Database(f.coll.Database().Name()), &dashboard.Config{Collections: []string{f.coll.Name()}, Token: fixtureToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/workers?c="+f.coll.Name(), nil)
	req.Header.Set("Authorization", "Bearer "+fixtureToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "welcome-1") {
		t.Fatalf("workers page: status %d, want 200 with the run of welcome-1:\n%s", resp.StatusCode, body)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the workers page read the history %d times for %d workers of this collection, want once", n, len(ids))
	}
}
