package mscheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// wantNotApplicable fails the test unless err is an *ActionError.
func wantNotApplicable(t *testing.T, err error, action string) {
	t.Helper()
	var ae *mscheduler.ActionError
	if !errors.As(err, &ae) || !errors.Is(err, mscheduler.ErrNotApplicable) || ae.Action != action || ae.Reason == "" {
		t.Fatalf("err = %v, want an ActionError of %s saying why", err, action)
	}
}

// blockUntilCancelled is a handler that reports its context's cause.
func blockUntilCancelled(causes chan<- error) mscheduler.Handler[int, int] {
	return func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, context.Cause(ctx)
	}
}

func waitCause(t *testing.T, causes <-chan error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case err := <-causes:
		return err, time.Since(start)
	case <-time.After(waitTimeout):
		t.Fatal("the handler was never cancelled")
		return nil, 0
	}
}

// TestCancel: a pending task is cancelled and never runs; a cancel of a
// cancelled task, or of an unknown one, says why and writes nothing.
func TestCancel(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", RunAt: time.Now().Add(time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, fastConfig("w", ev))
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "probe", RunAt: time.Now().Add(1500 * time.Millisecond)}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "probe", "succeeded")
	if st := readTask(t, coll, "k"); st.Status != "cancelled" || len(st.Runs) != 0 {
		t.Fatalf("cancelled task: %+v, want it cancelled and never run", st)
	}
	wantNotApplicable(t, p.Cancel(ctxT(t), "k"), "cancel")
	wantNotApplicable(t, p.Cancel(ctxT(t), "probe"), "cancel")
	if err := p.Cancel(ctxT(t), "nope"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("cancel of an unknown key: %v, want ErrNotFound", err)
	}
}

// TestCancelRunningHandlerInThisProcess: a consumer that shares the
// producer's client has its running handler cancelled at once (its pings
// are 10 s apart), with cause ErrCancelled; the run is recorded cancelled,
// not failed.
func TestCancelRunningHandlerInThisProcess(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 10 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, coll, blockUntilCancelled(causes), fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	if err := p.Cancel(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	cause, took := waitCause(t, causes)
	if !errors.Is(cause, mscheduler.ErrCancelled) || took > 5*time.Second {
		t.Fatalf("handler cancelled after %s with cause %v, want ErrCancelled at once", took, cause)
	}
	ev.WaitCount(t, mscheduler.EventCancelled, 1)
	st := readTask(t, coll, "k")
	if st.Status != "cancelled" || len(st.Runs) != 1 || st.Runs[0].Outcome != "cancelled" || st.FailedRuns != 0 || st.Running != 0 {
		t.Fatalf("task %+v, want cancelled with its run recorded cancelled", st)
	}
}

// TestCancelRunningHandlerInAnotherProcess: a consumer on another client
// learns of the cancel at its next ping (the development server has no
// change streams).
func TestCancelRunningHandlerInAnotherProcess(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 200 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, dbCollection(mschedulertest.NewClient(t), coll), blockUntilCancelled(causes), fastConfig("other", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	if err := p.Cancel(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	if cause, _ := waitCause(t, causes); !errors.Is(cause, mscheduler.ErrCancelled) {
		t.Fatalf("cause %v, want ErrCancelled", cause)
	}
	ev.WaitCount(t, mscheduler.EventCancelled, 1)
	if st := readTask(t, coll, "k"); st.Status != "cancelled" || st.Runs[0].Outcome != "cancelled" {
		t.Fatalf("task %+v", st)
	}
}

// TestRetry: a failed task becomes pending with its failures reset and
// runs again; retrying a pending task says why and writes nothing.
func TestRetry(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxFailedRuns: 1, MaxRetries: mscheduler.NoRetries}, nil); err != nil {
		t.Fatal(err)
	}
	wantNotApplicable(t, p.Retry(ctxT(t), "k"), "retry")
	ev := mschedulertest.NewEvents()
	fixed := make(chan struct{})
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) {
		select {
		case <-fixed:
			return 1, nil
		default:
			return 0, errors.New("broken")
		}
	}, fastConfig("w", ev))
	waitStatus(t, ev, coll, "k", "failed")
	close(fixed)
	if err := p.Retry(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "k", "succeeded")
	st := readTask(t, coll, "k")
	if st.FailedRuns != 0 || len(st.Runs) != 2 || st.Runs[0].Outcome != "failed" || st.Runs[1].Outcome != "succeeded" {
		t.Fatalf("task after retry %+v, want its failure kept in the history and a success", st)
	}
	if err := p.Retry(ctxT(t), "nope"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("retry of an unknown key: %v", err)
	}
}

// TestRunNow: a task due in an hour runs now; a plan's current planned time
// runs now and the next one stays on the grid.
func TestRunNow(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Hour)
	plan.Start = time.Now().Add(time.Hour).Truncate(time.Second)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "later", RunAt: time.Now().Add(time.Hour)}, {Key: "plan", Plan: &plan}}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	startConsumer(t, coll, recordingHandler(log, 0), fastConfig("w", ev))
	for _, key := range []string{"later", "plan"} {
		if err := p.RunNow(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, ev, coll, "later", "succeeded")
	ev.WaitFor(t, "the plan to run", func([]mscheduler.Event) bool { st, _ := readPlan(t, coll, "plan"); return st.Runs == 1 })
	st, _ := readPlan(t, coll, "plan")
	if ran := log.planned(); len(ran) != 1 || !ran[0].Equal(plan.Start) || !st.Planned.Equal(plan.Start.Add(time.Hour)) {
		t.Fatalf("ran %v, now planned %s; want %s run now and %s next", ran, st.Planned, plan.Start, plan.Start.Add(time.Hour))
	}
	wantNotApplicable(t, p.RunNow(ctxT(t), "later"), "run now")
}

// TestDelete: a task with a run going is not deleted without force; with
// force its run is cancelled and it is gone. DeleteFinished removes only
// finished tasks older than asked.
func TestDelete(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 10 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	startConsumer(t, coll, blockUntilCancelled(causes), fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	wantNotApplicable(t, p.Delete(ctxT(t), "k", nil), "delete")
	if err := p.Delete(ctxT(t), "k", &mscheduler.DeleteOpts{Force: true}); err != nil {
		t.Fatal(err)
	}
	if cause, _ := waitCause(t, causes); !errors.Is(cause, mscheduler.ErrCancelled) {
		t.Fatalf("cause %v, want ErrCancelled", cause)
	}
	if n := countDocs(t, coll, bson.D{{Key: "_id", Value: "k"}}); n != 0 {
		t.Fatal("the task is still there")
	}
	if err := p.Delete(ctxT(t), "k", nil); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("delete of a deleted task: %v", err)
	}

	old := time.Now().Add(-2 * time.Hour)
	var tasks []mscheduler.Task[int]
	for _, k := range []string{"s", "f", "c", "recent", "pending"} {
		tasks = append(tasks, mscheduler.Task[int]{Key: k, RunAt: time.Now().Add(time.Hour)})
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	for k, status := range map[string]string{"s": "succeeded", "f": "failed", "c": "cancelled", "recent": "succeeded"} {
		set := bson.D{{Key: "status", Value: status}}
		if k != "recent" {
			set = append(set, bson.E{Key: "updated_at", Value: old})
		}
		setFields(t, coll, k, set)
	}
	setFields(t, coll, "pending", bson.D{{Key: "updated_at", Value: old}})
	n, err := p.DeleteFinished(ctxT(t), time.Hour)
	if err != nil || n != 3 {
		t.Fatalf("DeleteFinished = %d, %v; want 3", n, err)
	}
	if left := countDocs(t, coll, bson.D{}); left != 2 {
		t.Fatalf("%d tasks left, want recent and pending", left)
	}
}

// TestGetShowsHolders: Get and List expose the runs going on, with their
// worker, run id, attempt (from the last ping) and lease.
func TestGetShowsHolders(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Concurrency: 2, PingInterval: 50 * time.Millisecond, WorkerTimeout: 5 * time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	release := make(chan struct{})
	defer close(release)
	for _, w := range []string{"a", "b"} {
		startConsumer(t, coll, holdUntil(release), fastConfig(w, ev))
	}
	ev.WaitCount(t, mscheduler.EventClaimed, 2)
	waitForLeaseRenewal(t, coll, "k", "a")
	waitForLeaseRenewal(t, coll, "k", "b")
	ti, err := p.Get(ctxT(t), "k")
	if err != nil || len(ti.Holders) != 2 {
		t.Fatalf("Get = %+v, %v; want 2 holders", ti, err)
	}
	for _, h := range ti.Holders {
		if (h.WorkerID != "a" && h.WorkerID != "b") || h.RunID == "" || h.Attempt != 1 || !h.LeaseUntil.After(h.Started) {
			t.Fatalf("holder %+v", h)
		}
	}
	list, err := p.List(ctxT(t), mscheduler.ListOpts{})
	if err != nil || len(list) != 1 || len(list[0].Holders) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

// TestTaskThatRunsNoMoreListsNoUpcomingTimes: a recurring task cancelled,
// or stored in another final status, has no upcoming planned times in Get
// or List, though its plan still has times to come.
func TestTaskThatRunsNoMoreListsNoUpcomingTimes(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Hour)
	plan.Start = time.Now().Add(time.Hour)
	keys := []string{"cancelled", "failed", "succeeded"}
	for _, key := range keys {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: key, Plan: &plan}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ti, err := p.Get(ctxT(t), "cancelled"); err != nil || ti.Plan == nil || len(ti.Plan.Upcoming) != mscheduler.UpcomingDefault {
		t.Fatalf("Get of a pending plan = %+v, %v; want %d upcoming times", ti, err, mscheduler.UpcomingDefault)
	}
	if err := p.Cancel(ctxT(t), "cancelled"); err != nil {
		t.Fatal(err)
	}
	// No run leaves a plan failed or succeeded (each occurrence's end
	// moves it on), but a document may say so.
	setFields(t, coll, "failed", bson.D{{Key: "status", Value: "failed"}})
	setFields(t, coll, "succeeded", bson.D{{Key: "status", Value: "succeeded"}, {Key: "free", Value: 0}, {Key: "succeeded", Value: 1}})
	for _, key := range keys {
		ti, err := p.Get(ctxT(t), key)
		if err != nil || ti.Plan == nil || ti.Problem != "" || string(ti.Status) != key || len(ti.Plan.Upcoming) != 0 {
			t.Errorf("Get of a %s plan = %+v, %v; want it %s, sound, with no upcoming times", key, ti, err, key)
		}
	}
	list, err := p.List(ctxT(t), mscheduler.ListOpts{Recurring: true})
	if err != nil || len(list) != len(keys) {
		t.Fatalf("List = %+v, %v; want the %d plans", list, err, len(keys))
	}
	for _, ti := range list {
		if len(ti.Plan.Upcoming) != 0 {
			t.Errorf("List: %s plan %s has upcoming times %v", ti.Status, ti.Task.Key, ti.Plan.Upcoming)
		}
	}
}

// TestActionsIfUnchanged: Retry, Cancel and Delete given IfUnchanged with
// the task as read act only while it is so: an Update (which moves its
// rev) or a publish of new params (which moves only updated_at) since the
// read refuses them, and nothing is written.
func TestActionsIfUnchanged(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", RunAt: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	read := func() *mscheduler.TaskInfo[int] {
		t.Helper()
		ti, err := p.Get(ctxT(t), "k")
		if err != nil {
			t.Fatal(err)
		}
		return ti
	}
	was := read()
	if err := p.Update(ctxT(t), "k", mscheduler.TaskUpdate{Description: new("edited")}); err != nil {
		t.Fatal(err)
	}
	if now := read(); now.Rev == was.Rev {
		t.Fatalf("Update left rev %d", now.Rev)
	}
	wantNotApplicable(t, p.Cancel(ctxT(t), "k", mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)), "cancel")
	was = read()
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Params: 7}, &mscheduler.PublishOpts{UpdateParams: true}); err != nil {
		t.Fatal(err)
	}
	wantNotApplicable(t, p.Delete(ctxT(t), "k", nil, mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)), "delete")
	if now := read(); now.Status != mscheduler.StatusPending || now.Task.Params != 7 {
		t.Fatalf("after refused actions: %s, params %d; want pending, 7", now.Status, now.Task.Params)
	}

	was = read()
	if err := p.Cancel(ctxT(t), "k", mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)); err != nil {
		t.Fatal(err)
	}
	wantNotApplicable(t, p.Retry(ctxT(t), "k", mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)), "retry")
	was = read()
	if err := p.Retry(ctxT(t), "k", mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)); err != nil {
		t.Fatal(err)
	}
	was = read()
	if err := p.Delete(ctxT(t), "k", nil, mscheduler.IfUnchanged(was.Rev, was.UpdatedAt)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctxT(t), "k"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}
