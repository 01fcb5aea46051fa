package mscheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestTimeoutIsRetriedThenFailsTheRun: a handler that runs past its
// Timeout gets a context with that deadline; each attempt fails with a
// timeout error, is retried locally, and then the run fails with the text.
func TestTimeoutIsRetriedThenFailsTheRun(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "slow", Timeout: 200 * time.Millisecond, MaxRetries: 2, RetryDelay: 10 * time.Millisecond, MaxFailedRuns: 1}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	deadlines := make(chan time.Duration, 10)
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		d, ok := ctx.Deadline()
		if !ok {
			deadlines <- -1
		} else {
			deadlines <- time.Until(d)
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	if n := ev.Count(mscheduler.EventRetried); n != 2 {
		t.Fatalf("local retries = %d, want 2", n)
	}
	for range 3 {
		if d := <-deadlines; d <= 0 || d > 200*time.Millisecond {
			t.Fatalf("handler context deadline %s away, want within the 200ms timeout", d)
		}
	}
	st := readTask(t, coll, "slow")
	if st.Status != "failed" || len(st.Runs) != 1 || st.Runs[0].Attempts != 3 || !strings.Contains(st.Runs[0].Error, "timed out after 200ms") {
		t.Fatalf("task = %+v, want failed after 3 attempts that timed out after 200ms", st)
	}
}

// TestHandlerIgnoringContextIsAbandoned: a handler that ignores its
// context past the deadline and the grace is abandoned: its run is failed
// and its slot freed at once, it is counted, and another worker finishes
// the task. The goroutine is released at the end (goleak checks it).
func TestHandlerIgnoringContextIsAbandoned(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "hang", Timeout: 200 * time.Millisecond, RetryDelay: 2 * time.Second, WorkerTimeout: time.Minute, PingInterval: 100 * time.Millisecond}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("stuck", ev)
	cfg.TimeoutGrace = 300 * time.Millisecond
	stuck := startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-release // ignores ctx
		return 0, nil
	}, cfg)
	t.Cleanup(func() { close(release) })
	ev.WaitCount(t, mscheduler.EventAbandoned, 1)
	abandonedAt := time.Now()
	if n := stuck.Abandoned(); n != 1 {
		t.Fatalf("Abandoned() = %d, want 1", n)
	}
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	st := readTask(t, coll, "hang")
	if st.Running != 0 || st.Free != 1 || len(st.Holders) != 0 || len(st.Runs) != 1 || !strings.Contains(st.Runs[0].Error, "abandoned") || st.Runs[0].Attempts != 1 {
		t.Fatalf("task after the abandon = %+v, want its slot free and the run failed as abandoned", st)
	}
	if time.Since(abandonedAt) > 10*time.Second {
		t.Fatalf("slot freed %s after the abandon", time.Since(abandonedAt))
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stuck.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 7, nil }, fastConfig("rescuer", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st = readTask(t, coll, "hang")
	if st.Status != "succeeded" || st.Runs[len(st.Runs)-1].WorkerID != "rescuer" {
		t.Fatalf("task = %+v, want it finished by the rescuer", st)
	}
}
