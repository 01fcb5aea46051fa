package mscheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestOversizeResultFailsTheRun: a result over MaxResultBytes is not
// stored; the run fails with an error that says so, and the task document
// stays small. A long error text is cut to MaxErrorBytes, saying so.
func TestOversizeResultFailsTheRun(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	tasks := []mscheduler.Task[string]{
		{Key: "big-result", Params: "result", MaxFailedRuns: 1},
		{Key: "long-error", Params: "error", MaxFailedRuns: 1, MaxRetries: mscheduler.NoRetries},
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.MaxResultBytes, cfg.MaxErrorBytes = 1<<10, 512
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "error" {
			return "", errors.New(strings.Repeat("e", 20_000))
		}
		return strings.Repeat("r", 20<<20), nil // 20 MiB: MongoDB would refuse the document
	}, cfg)
	waitStatus(t, ev, coll, "big-result", "failed")
	waitStatus(t, ev, coll, "long-error", "failed")
	big := readTask(t, coll, "big-result").Runs[0]
	if big.Outcome != "failed" || big.Result.Type != 0 || !strings.Contains(big.Error, "over MaxResultBytes (1024)") || big.Attempts != 1 {
		t.Fatalf("run with a 20 MiB result: %+v", big)
	}
	long := readTask(t, coll, "long-error").Runs[0]
	if len(long.Error) > 512 || !strings.Contains(long.Error, "20000 bytes, cut to MaxErrorBytes") {
		t.Fatalf("error of %d bytes stored as %d bytes: %q", 20_000, len(long.Error), long.Error)
	}
}

// TestOversizeParamsAreRefused: params over MaxParamsBytes are refused at
// publish, naming the field, and nothing is written.
func TestOversizeParamsAreRefused(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	_, err := p.Publish(ctxT(t), mscheduler.Task[string]{Key: "k", Params: strings.Repeat("p", mscheduler.MaxParamsBytes)}, nil)
	wantInvalid(t, err, "Params")
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("%d documents written", n)
	}
}

// TestConsumerConfigKeepsRunsWithinTheDocument: caps whose run records
// could outgrow a task document are refused, naming the field.
func TestConsumerConfigKeepsRunsWithinTheDocument(t *testing.T) {
	coll := mschedulertest.Collection(t)
	h := func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }
	_, err := mscheduler.NewConsumer(coll, h, &mscheduler.ConsumerConfig{RunsKept: 100, MaxResultBytes: 1 << 20})
	wantInvalid(t, err, "MaxResultBytes")
	if _, err := mscheduler.NewConsumer(coll, h, &mscheduler.ConsumerConfig{RunsKept: 100, MaxResultBytes: 32 << 10}); err != nil {
		t.Fatalf("100 runs of 32 KiB: %v", err)
	}
	// Left at zero, the result cap shrinks to fit more runs kept.
	if _, err := mscheduler.NewConsumer(coll, h, &mscheduler.ConsumerConfig{RunsKept: 200}); err != nil {
		t.Fatalf("200 runs with the default caps: %v", err)
	}
	_, err = mscheduler.NewConsumer(coll, h, &mscheduler.ConsumerConfig{RunsKept: 10_000})
	wantInvalid(t, err, "RunsKept")
}

// TestRunEndOverTheDocumentLimitSetsTaskInvalid: on MongoDB, which refuses
// a document over 16 MiB, a task edited by hand to the brink of the limit
// cannot take its run record: the run end falls back to the minimal write
// and the task is set invalid, instead of its run expiring and running
// again. (The development server enforces no such limit.)
func TestRunEndOverTheDocumentLimitSetsTaskInvalid(t *testing.T) {
	if mschedulertest.Server() != nil {
		t.Skip("the development server does not enforce MongoDB's 16 MiB document limit; run with MONGODB_URI")
	}
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: mscheduler.NoRetries}, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "k", bson.D{{Key: "description", Value: strings.Repeat("d", 16<<20-2<<10)}})
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) {
		return 0, errors.New(strings.Repeat("e", 4<<10))
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventInvalid, 1)
	if it := readInvalid(t, coll, "k"); it.Status != "invalid" || it.held("w") || it.Invalid.Found != "run end" {
		t.Fatalf("task at the size limit: %+v", it)
	}
}

// TestFailedRunIsLoggedWithItsError: a failed run is logged at WARN with
// the task's key and the error text, so that the log says why.
func TestFailedRunIsLoggedWithItsError(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var out mschedulertest.Buffer
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) {
		return 0, errors.New("disk full on /var/spool")
	}, cfg)
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, `msg="run failed"`) {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "key=k") || !strings.Contains(line, `error="disk full on /var/spool"`) {
		t.Fatalf("failed run logged as %q, want a WARN line with the key and the error:\n%s", line, out.String())
	}
}

// TestMiddlewareWrapsEveryAttempt: middleware sees each attempt of each
// run, outermost first, with the task's key and the attempt number, and
// the error it returns is the attempt's.
func TestMiddlewareWrapsEveryAttempt(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", MaxRetries: 1, RetryDelay: time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	trace := func(name string) mscheduler.Middleware {
		return func(next mscheduler.RunFunc) mscheduler.RunFunc {
			return func(ctx context.Context, a *mscheduler.Attempt) error {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s %s %d", name, a.Key, a.Run.Attempt))
				mu.Unlock()
				err := next(ctx, a)
				if name == "inner" && err != nil {
					return fmt.Errorf("traced: %w", err)
				}
				return err
			}
		}
	}
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Middleware = []mscheduler.Middleware{trace("outer"), trace("inner")}
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Run.Attempt == 1 {
			return 0, errors.New("first try")
		}
		return 2, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"outer k 1", "inner k 1", "outer k 2", "inner k 2"}; !slices.Equal(seen, want) {
		t.Fatalf("middleware saw %v, want %v", seen, want)
	}
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventRetried && (e.Err == nil || !strings.Contains(e.Err.Error(), "traced: first try")) {
			t.Fatalf("retried with %v, want the middleware's error", e.Err)
		}
	}
}
