package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// invalidTask is what a person sees of a task set invalid.
type invalidTask struct {
	Status  string        `bson:"status"`
	Holders bson.RawValue `bson:"holders"`
	Invalid struct {
		Reason   string `bson:"reason"`
		Field    string `bson:"field"`
		Found    string `bson:"found"`
		WorkerID string `bson:"worker_id"`
		Run      *struct {
			RunID   string `bson:"run_id"`
			Outcome string `bson:"outcome"`
		} `bson:"run"`
	} `bson:"invalid"`
}

// held reports whether worker holds a run of the task.
func (it invalidTask) held(worker string) bool {
	doc, ok := it.Holders.DocumentOK()
	return ok && doc.Lookup(worker).Type != 0
}

func readInvalid(t *testing.T, coll *mongo.Collection, key string) invalidTask {
	t.Helper()
	var it invalidTask
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&it); err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return it
}

// editTask applies an update by hand, as a person would in mongosh.
func editTask(t *testing.T, coll *mongo.Collection, key string, update bson.D) {
	t.Helper()
	res, err := coll.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: key}}, update)
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("edit %q: %v (matched %v)", key, err, res)
	}
}

// invalidEvents counts the invalid events per key.
func invalidEvents(ev *mschedulertest.Events) map[string]int {
	out := map[string]int{}
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventInvalid {
			out[e.Key]++
		}
	}
	return out
}

// TestHandEditedDocumentsAreSetInvalid: every shape a person can leave a
// document in with mongosh, on tasks waiting to run. Each bad task is set
// to status invalid once, with the field named in invalid.reason (one
// query finds them all), and is never claimed again; good tasks and a
// document without schema run; a repaired task runs.
func TestHandEditedDocumentsAreSetInvalid(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	shapes := []struct {
		key   string
		edit  bson.D
		field string
	}{
		{"params", bson.D{{Key: "$set", Value: bson.D{{Key: "params", Value: "not a document"}}}}, "params"},
		{"max-retries", bson.D{{Key: "$set", Value: bson.D{{Key: "max_retries", Value: "many"}}}}, "max_retries"},
		{"concurrency", bson.D{{Key: "$set", Value: bson.D{{Key: "concurrency", Value: 0}, {Key: "free", Value: 0}}}}, "concurrency"},
		{"holders", bson.D{{Key: "$set", Value: bson.D{{Key: "holders", Value: "garbage"}}}}, "holders"},
		{"max-failed-runs", bson.D{{Key: "$set", Value: bson.D{{Key: "max_failed_runs", Value: "3"}}}}, "max_failed_runs"},
		{"failed-runs", bson.D{{Key: "$set", Value: bson.D{{Key: "failed_runs", Value: "0"}}}}, "failed_runs"},
		{"runs", bson.D{{Key: "$set", Value: bson.D{{Key: "runs", Value: "none"}}}}, "runs"},
		{"running", bson.D{{Key: "$set", Value: bson.D{{Key: "running", Value: "zero"}}}}, "running"},
		{"run-at", bson.D{{Key: "$set", Value: bson.D{{Key: "run_at", Value: "tomorrow"}}}}, "run_at"},
		{"no-status", bson.D{{Key: "$unset", Value: bson.D{{Key: "status", Value: ""}}}}, "status"},
		{"queued", bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "queued"}}}}, "status"},
		{"timeout", bson.D{{Key: "$set", Value: bson.D{{Key: "ping_interval_ms", Value: 30000}, {Key: "worker_timeout_ms", Value: 10000}}}}, "worker_timeout_ms"},
		{"plan", bson.D{{Key: "$set", Value: bson.D{{Key: "plan", Value: bson.D{{Key: "kind", Value: "every"}, {Key: "every", Value: "often"}}}}}}, "plan.every"},
	}
	var tasks []mscheduler.Task[sum]
	for i, s := range shapes {
		tasks = append(tasks, mscheduler.Task[sum]{Key: s.key, Priority: 100 - i, MaxFailedRuns: 1})
	}
	tasks = append(tasks, mscheduler.Task[sum]{Key: "good1"}, mscheduler.Task[sum]{Key: "good2"}, mscheduler.Task[sum]{Key: "no-schema"})
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range shapes {
		editTask(t, coll, s.key, s.edit)
	}
	editTask(t, coll, "no-schema", bson.D{{Key: "$unset", Value: bson.D{{Key: "schema", Value: ""}}}})
	// A document written by hand, as a new user would try first.
	if _, err := coll.InsertOne(ctxT(t), bson.D{{Key: "_id", Value: "minimal"}, {Key: "status", Value: "pending"}, {Key: "params", Value: bson.D{{Key: "a", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
	shapes = append(shapes, struct {
		key   string
		edit  bson.D
		field string
	}{"minimal", nil, "run_at"})

	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.CheckInterval = 200 * time.Millisecond
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) { return task.Params.A, nil }, cfg)
	ev.WaitFor(t, "every bad task set invalid and the good ones run", func([]mscheduler.Event) bool {
		return countDocs(t, coll, bson.D{{Key: "status", Value: "invalid"}}) == int64(len(shapes)) &&
			countDocs(t, coll, bson.D{{Key: "status", Value: "succeeded"}}) == 3
	})
	for _, s := range shapes {
		it := readInvalid(t, coll, s.key)
		if it.Invalid.Field != s.field || !strings.Contains(it.Invalid.Reason, s.field) || it.Invalid.WorkerID != "w" || it.held("w") {
			t.Errorf("%s: %+v, want it invalid naming %s, no holder", s.key, it, s.field)
		}
	}
	// Said once each, and never claimed again.
	claimsBefore := ev.Count(mscheduler.EventClaimed)
	p2 := newProducer[sum](t, coll, nil)
	if _, err := p2.Publish(ctxT(t), mscheduler.Task[sum]{Key: "probe"}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "probe", "succeeded")
	if n := ev.Count(mscheduler.EventClaimed); n != claimsBefore+1 {
		t.Errorf("%d claims after the bad tasks were set invalid, want only the probe's", n-claimsBefore)
	}
	for key, n := range invalidEvents(ev) {
		if n != 1 {
			t.Errorf("%s reported invalid %d times, want once", key, n)
		}
	}
	if n := ev.Count(mscheduler.EventError); n > 0 {
		t.Errorf("%d error events: %v", n, ev.Snapshot())
	}

	// Repaired, a task runs again.
	editTask(t, coll, "max-failed-runs", bson.D{{Key: "$set", Value: bson.D{{Key: "max_failed_runs", Value: 3}, {Key: "status", Value: "pending"}}}})
	waitStatus(t, ev, coll, "max-failed-runs", "succeeded")
	if it := readInvalid(t, coll, "max-failed-runs"); it.Invalid.Reason != "" {
		t.Errorf("repaired task still carries %+v", it.Invalid)
	}
}

// TestRunEndRefusedSetsTaskInvalid: a field that the end of a failed run
// writes or filters on is edited into the wrong type while the run goes on.
// The run end the server cannot apply falls back to the minimal write: the
// run's holder is gone, the task is invalid with the field named and the
// run's outcome kept, once, and no error repeats.
func TestRunEndRefusedSetsTaskInvalid(t *testing.T) {
	for _, tc := range []struct{ field, value string }{{"failed_runs", "x"}, {"max_failed_runs", "3"}, {"runs", "none"}} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			task := mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 2 * time.Second, MaxRetries: mscheduler.NoRetries}
			if _, err := p.Publish(ctxT(t), task, nil); err != nil {
				t.Fatal(err)
			}
			ev := mschedulertest.NewEvents()
			release := make(chan struct{})
			startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
				<-release
				return 0, errors.New("it failed")
			}, fastConfig("w", ev))
			ev.WaitCount(t, mscheduler.EventClaimed, 1)
			editTask(t, coll, "k", bson.D{{Key: "$set", Value: bson.D{{Key: tc.field, Value: tc.value}}}})
			close(release)
			ev.WaitCount(t, mscheduler.EventInvalid, 1)
			it := readInvalid(t, coll, "k")
			if it.Status != "invalid" || it.held("w") || it.Invalid.Field != tc.field || it.Invalid.Found != "run end" ||
				it.Invalid.Run == nil || it.Invalid.Run.Outcome != "failed" {
				t.Fatalf("after the refused run end: %+v", it)
			}
			// Nothing repeats: the next sweeps and polls find nothing to do.
			waitSweeps(t, coll, 3)
			if n, m := ev.Count(mscheduler.EventError), ev.Count(mscheduler.EventInvalid); n > 0 || m != 1 {
				t.Fatalf("%d error and %d invalid events, want none and one: %v", n, m, ev.Snapshot())
			}
		})
	}
}

// waitSweeps waits until n sweep intervals of fastConfig have passed, for
// checks that something does not happen again.
func waitSweeps(t *testing.T, coll *mongo.Collection, n int) {
	t.Helper()
	// A sleep is the point here: the check is that nothing happens while
	// the consumer's loops go round.
	time.Sleep(time.Duration(n) * fastConfig("", nil).SweepInterval)
}

// TestSixtyBadTasksBesideGoodOnes: 60 pending tasks that cannot be decoded
// sort before the good ones, and 60 tasks whose dead holder's lease lapsed
// have a field the run end writes broken, so that their sweep's write is
// refused. The good pending tasks run, a good task's lapsed run is
// expired and run again, every bad task is set invalid once, and error
// events stay bounded.
func TestSixtyBadTasksBesideGoodOnes(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	var tasks []mscheduler.Task[sum]
	for i := range 60 {
		tasks = append(tasks, mscheduler.Task[sum]{Key: fmt.Sprintf("bad-pending-%02d", i), Priority: 10})
		tasks = append(tasks, mscheduler.Task[sum]{Key: fmt.Sprintf("bad-expired-%02d", i)})
	}
	for i := range 5 {
		tasks = append(tasks, mscheduler.Task[sum]{Key: fmt.Sprintf("good-%d", i)})
	}
	tasks = append(tasks, mscheduler.Task[sum]{Key: "good-expired"})
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	deadHolder := func(key string, broken bson.E) {
		set := bson.D{{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0},
			{Key: "holders.dead", Value: bson.D{{Key: "run", Value: "r-" + key}, {Key: "started", Value: long}, {Key: "lease_until", Value: long.Add(time.Second)}}},
			{Key: "next_expiry", Value: long.Add(time.Second)}}
		if broken.Key != "" {
			set = append(set, broken)
		}
		editTask(t, coll, key, bson.D{{Key: "$set", Value: set}})
	}
	brokenFields := []bson.E{{Key: "max_failed_runs", Value: "3"}, {Key: "failed_runs", Value: "0"}, {Key: "runs", Value: "x"}, {Key: "rev", Value: "r"}}
	for i := range 60 {
		editTask(t, coll, fmt.Sprintf("bad-pending-%02d", i), bson.D{{Key: "$set", Value: bson.D{{Key: "params", Value: bson.A{i}}}}})
		deadHolder(fmt.Sprintf("bad-expired-%02d", i), brokenFields[i%len(brokenFields)])
	}
	deadHolder("good-expired", bson.E{})

	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) { return 0, nil }, fastConfig("w", ev))
	ev.WaitFor(t, "the good tasks to succeed and the bad ones to be set invalid", func([]mscheduler.Event) bool {
		return countDocs(t, coll, bson.D{{Key: "status", Value: "succeeded"}}) == 6 &&
			countDocs(t, coll, bson.D{{Key: "status", Value: "invalid"}}) == 120
	})
	if st := readTask(t, coll, "good-expired"); len(st.Runs) != 2 || st.Runs[0].Outcome != "expired" || st.Runs[1].Outcome != "succeeded" {
		t.Fatalf("good-expired: %+v, want its lapsed run expired, then a success", st)
	}
	for i := range 60 {
		key := fmt.Sprintf("bad-expired-%02d", i)
		if it := readInvalid(t, coll, key); it.held("dead") || it.Invalid.Run == nil || it.Invalid.Run.Outcome != "expired" {
			t.Fatalf("%s: %+v, want its lapsed run ended as expired and the task invalid", key, it)
		}
	}
	waitSweeps(t, coll, 2)
	for key, n := range invalidEvents(ev) {
		if n != 1 {
			t.Errorf("%s reported invalid %d times, want once", key, n)
		}
	}
	// The first sweeps may see a few tasks at once; nothing spins.
	if n := ev.Count(mscheduler.EventError); n > 10 {
		t.Errorf("%d error events, want a handful at most: %v", n, mschedulertest.Summarize(ev.Snapshot()))
	}
}

// TestListAndGetShowBadDocuments: one bad document does not stop List;
// Get and List return it with its problem, naming the field.
func TestListAndGetShowBadDocuments(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[sum]{{Key: "a"}, {Key: "b"}, {Key: "c"}}, nil); err != nil {
		t.Fatal(err)
	}
	editTask(t, coll, "b", bson.D{{Key: "$set", Value: bson.D{{Key: "concurrency", Value: "two"}}}})
	editTask(t, coll, "c", bson.D{{Key: "$set", Value: bson.D{{Key: "params", Value: "text"}}}})
	list, err := p.List(ctxT(t), mscheduler.ListOpts{})
	if err != nil || len(list) != 3 {
		t.Fatalf("List = %d tasks, %v; want all 3", len(list), err)
	}
	want := map[string]string{"a": "", "b": "field concurrency", "c": "field params"}
	for _, ti := range list {
		if w := want[ti.Task.Key]; (w == "") != (ti.Problem == "") || !strings.Contains(ti.Problem, w) {
			t.Errorf("%s: problem %q, want one naming %q", ti.Task.Key, ti.Problem, w)
		}
	}
	ti, err := p.Get(ctxT(t), "b")
	if err != nil || !strings.Contains(ti.Problem, "concurrency") || ti.Status != mscheduler.StatusPending {
		t.Fatalf("Get(b) = %+v, %v", ti, err)
	}
}
