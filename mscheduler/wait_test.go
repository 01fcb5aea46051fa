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

// TestWait: Wait returns once a task succeeds (with its result), fails
// (with its error) or is cancelled; it returns ErrNotFound for an unknown
// or deleted key and the context's error when its deadline passes first.
func TestWait(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	tasks := []mscheduler.Task[string]{
		{Key: "ok", Params: "ok"}, {Key: "fails", Params: "fail", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
		{Key: "blocked", Params: "block"}, {Key: "later", RunAt: time.Now().Add(time.Hour)},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, dbCollection(mschedulertest.NewClient(t), coll), func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		switch task.Params {
		case "fail":
			return "", errors.New("it failed")
		case "block":
			<-ctx.Done()
			return "", context.Cause(ctx)
		}
		return "result", nil
	}, fastConfig("w", ev))

	ok, err := p.Wait(ctxT(t), "ok")
	var result string
	if err != nil || ok.Status != mscheduler.StatusSucceeded || len(ok.Runs) != 1 || ok.Runs[0].Result.Unmarshal(&result) != nil || result != "result" {
		t.Fatalf("Wait(ok) = %+v, %v; want succeeded with its result", ok, err)
	}
	fails, err := p.Wait(ctxT(t), "fails")
	if err != nil || fails.Status != mscheduler.StatusFailed || fails.Runs[len(fails.Runs)-1].Error != "it failed" {
		t.Fatalf("Wait(fails) = %+v, %v; want failed with its error", fails, err)
	}
	ev.WaitFor(t, "blocked to run", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventClaimed && e.Key == "blocked" {
				return true
			}
		}
		return false
	})
	go func() { _ = p.Cancel(context.Background(), "blocked") }() // before or during the wait
	cancelled, err := p.Wait(ctxT(t), "blocked")
	if err != nil || cancelled.Status != mscheduler.StatusCancelled {
		t.Fatalf("Wait(blocked) = %+v, %v; want cancelled", cancelled, err)
	}
	// Cancelled while it ran: Wait returns once the run is recorded.
	if last, ok := cancelled.LastRun(); !ok || last.Outcome != mscheduler.OutcomeCancelled || len(cancelled.Holders) != 0 {
		t.Fatalf("Wait(blocked) returned runs %+v, holders %+v; want the cancelled run recorded and none going", cancelled.Runs, cancelled.Holders)
	}
	if _, err := p.Wait(ctxT(t), "nope"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("Wait(nope) = %v, want ErrNotFound", err)
	}
	short, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short, "later"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait(later) = %v, want the deadline", err)
	}
	// A task deleted while waited for ends the wait with ErrNotFound.
	deleted := make(chan error, 1)
	go func() {
		_, err := p.Wait(ctxT(t), "later")
		deleted <- err
	}()
	if err := p.Delete(ctxT(t), "later", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("Wait(later) while it was deleted = %v, want ErrNotFound", err)
	}
}

// TestCompletions: a producer sharing its client with a consumer hears of
// every task that ends, with its final status.
func TestCompletions(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := p.Completions(ctx, 10)
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "fail" {
			return "", errors.New("no")
		}
		return "", nil
	}, fastConfig("w", ev))
	tasks := []mscheduler.Task[string]{{Key: "a"}, {Key: "b", Params: "fail", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1}}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]mscheduler.Status{}
	for len(got) < 2 {
		select {
		case c := <-done:
			got[c.Key] = c.Status
		case <-time.After(waitTimeout):
			t.Fatalf("completions so far %v", got)
		}
	}
	if got["a"] != mscheduler.StatusSucceeded || got["b"] != mscheduler.StatusFailed {
		t.Fatalf("completions %v", got)
	}
	cancel()
	for range done { // closed when ctx is done
	}
}

// completionOf waits for the completion of key, passing over those of
// other tasks.
func completionOf(t *testing.T, done <-chan mscheduler.Completion, key string) mscheduler.Completion {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case c := <-done:
			if c.Key == key {
				return c
			}
		case <-timeout:
			t.Fatalf("no completion of %q", key)
		}
	}
}

// TestCompletionsOfCancelledPendingTask: a task cancelled while no run of
// it goes is final at once, with no run end to tell of it; Completions
// reports it all the same.
func TestCompletionsOfCancelledPendingTask(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	done := p.Completions(ctxT(t), 10)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "later", RunAt: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctxT(t), "later"); err != nil {
		t.Fatal(err)
	}
	if c := completionOf(t, done, "later"); c.Status != mscheduler.StatusCancelled {
		t.Fatalf("completion %+v, want cancelled", c)
	}
}

// TestCompletionsOfPlanFinishedAtClaim: a once plan whose only planned
// time is skipped is finished by the consumer that claims it, which gives
// the run back before it starts; a producer sharing the consumer's client
// hears of it.
func TestCompletionsOfPlanFinishedAtClaim(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	done := p.Completions(ctxT(t), 10)
	once := mscheduler.Once(time.Now())
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "once", Plan: &once}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.SkipNext(ctxT(t), "once", 1); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", ev))
	if c := completionOf(t, done, "once"); c.Status != mscheduler.StatusFinished {
		t.Fatalf("completion %+v, want finished", c)
	}
	if n := ev.Count(mscheduler.EventSucceeded); n != 0 {
		t.Fatalf("%d runs succeeded, want none: the only planned time was skipped", n)
	}
}

// TestCompletionsOfTaskSetInvalid: a task edited by hand out of shape is
// set invalid by the consumer that finds it, with no run; a producer
// sharing the consumer's client hears of it.
func TestCompletionsOfTaskSetInvalid(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[sum](t, coll, nil)
	done := p.Completions(ctxT(t), 10)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[sum]{Key: "edited"}, nil); err != nil {
		t.Fatal(err)
	}
	editTask(t, coll, "edited", bson.D{{Key: "$set", Value: bson.D{{Key: "params", Value: "not a document"}}}})
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[sum]) (int, error) { return 0, nil }, fastConfig("w", mschedulertest.NewEvents()))
	if c := completionOf(t, done, "edited"); c.Status != mscheduler.StatusInvalid {
		t.Fatalf("completion %+v, want invalid", c)
	}
}
