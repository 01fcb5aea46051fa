package gateway_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/worker/gateway"
)

// holdersOf are the worker ids holding runs of a task, sorted.
func holdersOf(t *testing.T, f *fixture, key string) []string {
	t.Helper()
	raw, err := f.coll.FindOne(t.Context(), bson.D{{Key: "key", Value: key}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	if h, ok := raw.Lookup("holders").DocumentOK(); ok {
		elems, _ := h.Elements()
		for _, e := range elems {
			ids = append(ids, e.Key())
		}
	}
	slices.Sort(ids)
	return ids
}

// takeEach has each executor take one run at once, each waiting up to
// 10 s, and returns the runs each got.
func takeEach(f *fixture, executors ...string) map[string][]map[string]any {
	var mu sync.Mutex
	got := map[string][]map[string]any{}
	var wg sync.WaitGroup
	for _, ex := range executors {
		wg.Go(func() {
			runs := f.take(ex, "s-"+ex, 1)
			mu.Lock()
			got[ex] = runs
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// TestATaskRunsOnAsManyExecutorsAsItsConcurrency: each executor is a
// worker, so a task of concurrency 3 runs on three executors at once, its
// runs held in the task document under the executors' own ids. One
// gateway consumer holding every run ran them one at a time.
func TestATaskRunsOnAsManyExecutorsAsItsConcurrency(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "c3", "concurrency": 3})
	got := takeEach(f, "e1", "e2", "e3")
	for _, ex := range []string{"e1", "e2", "e3"} {
		if len(got[ex]) != 1 || got[ex][0]["key"] != "c3" {
			t.Errorf("executor %s took %v, want one run of c3", ex, got[ex])
		}
	}
	if h := holdersOf(t, f, "c3"); !slices.Equal(h, []string{"e1", "e2", "e3"}) {
		t.Errorf("holders of c3: %v, want the executors e1, e2 and e3", h)
	}
	for _, ex := range []string{"e1", "e2", "e3"} {
		if code, out := f.call("POST", "/complete", "", map[string]any{"executor": ex, "run_id": got[ex][0]["run_id"], "result": 1}); code != 200 {
			t.Fatalf("%s's complete: %d %v", ex, code, out)
		}
	}
	raw, err := f.coll.FindOne(t.Context(), bson.D{{Key: "key", Value: "c3"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := raw.Lookup("status").StringValueOK(); status != "succeeded" {
		t.Errorf("c3 after three completes: %q, want succeeded", status)
	}
	var by []string
	runs, _ := raw.Lookup("runs").ArrayOK()
	vals, _ := runs.Values()
	for _, v := range vals {
		id, _ := v.Document().Lookup("worker_id").StringValueOK()
		by = append(by, id)
	}
	slices.Sort(by)
	if !slices.Equal(by, []string{"e1", "e2", "e3"}) {
		t.Errorf("c3's runs recorded for %v, want e1, e2 and e3", by)
	}
}

// TestWorkerIDsAndDistinctWorkersNameExecutors: a task's worker_ids and
// DistinctWorkers name executors as they name Go workers.
func TestWorkerIDsAndDistinctWorkersNameExecutors(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "only-e2", "worker_ids": []string{"e2"}})
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e1", "max": 1, "wait_ms": 300}); code != 200 || len(out["runs"].([]any)) != 0 {
		t.Fatalf("e1's take of a task for e2 only: %d %v, want no run", code, out)
	}
	if runs := f.take("e2", "s", 1); len(runs) != 1 || runs[0]["key"] != "only-e2" {
		t.Fatalf("e2 took %v, want the run of only-e2", runs)
	}

	// Two successes on two distinct workers: an executor that succeeded
	// once is not given the task again.
	f.publish(map[string]any{"key": "distinct", "concurrency": 2, "distinct_workers": true})
	first := f.take("e3", "s", 1)
	if len(first) != 1 || first[0]["key"] != "distinct" {
		t.Fatalf("e3 took %v, want the run of distinct", first)
	}
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e3", "run_id": first[0]["run_id"], "result": 1}); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e3", "max": 1, "wait_ms": 300}); code != 200 || len(out["runs"].([]any)) != 0 {
		t.Fatalf("e3's second take of a distinct-workers task it did: %d %v, want no run", code, out)
	}
	if runs := f.take("e4", "s", 1); len(runs) != 1 || runs[0]["key"] != "distinct" {
		t.Fatalf("e4 took %v, want the second run of distinct", runs)
	}
}

// TestAnExecutorGoneHasItsConsumerStopped: each executor has a consumer of
// its own; once it has not called for the registry's staleness and holds
// no run, that consumer is stopped, so that executors that came and went
// do not fill MaxPools. One that comes back gets a new one.
func TestAnExecutorGoneHasItsConsumerStopped(t *testing.T) {
	f := newFixture(t, &gateway.Config{HeartbeatInterval: 50 * time.Millisecond, MaxPools: 2})
	f.publish(map[string]any{"key": "a"}, map[string]any{"key": "b"})
	for _, ex := range []string{"e1", "e2"} {
		runs := f.take(ex, "s", 1)
		if len(runs) != 1 {
			t.Fatalf("%s took %d runs, want 1", ex, len(runs))
		}
		if code, out := f.call("POST", "/complete", "", map[string]any{"executor": ex, "run_id": runs[0]["run_id"], "result": 1}); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
	}
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e3", "max": 1}); code != 429 {
		t.Fatalf("a third executor's take with MaxPools 2: %d %v, want 429", code, out)
	}
	deadline := time.Now().Add(time.Minute)
	for gateway.ReapIdlePools(f.gw); gateway.Pools(f.gw) != 0; gateway.ReapIdlePools(f.gw) {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers a minute after their executors' last calls, want 0", gateway.Pools(f.gw))
		}
		<-time.After(50 * time.Millisecond)
	}
	f.publish(map[string]any{"key": "c"})
	if runs := f.take("e3", "s", 1); len(runs) != 1 || runs[0]["key"] != "c" {
		t.Fatalf("e3 took %v once the others' consumers stopped, want the run of c", runs)
	}
}

// TestAReapedPoolServesNoTake: a take that finds its executor's consumer
// stopping answers with no run at once, and the next take starts a new
// consumer, whatever the order in which a take and the reaping meet.
func TestAReapedPoolServesNoTake(t *testing.T) {
	f := newFixture(t, &gateway.Config{HeartbeatInterval: 20 * time.Millisecond})
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		f.publish(map[string]any{"key": key})
		ctx, cancel := context.WithCancel(t.Context())
		stop := make(chan struct{})
		go func() {
			defer close(stop)
			for ctx.Err() == nil {
				gateway.ReapIdlePools(f.gw)
				<-time.After(time.Millisecond)
			}
		}()
		var runs []map[string]any
		deadline := time.Now().Add(30 * time.Second)
		for len(runs) == 0 && time.Now().Before(deadline) {
			code, out := f.call("POST", "/take", "", map[string]any{"executor": "e", "max": 1, "wait_ms": 2000})
			if code != 200 {
				t.Fatalf("take: %d %v", code, out)
			}
			for _, r := range out["runs"].([]any) {
				runs = append(runs, r.(map[string]any))
			}
		}
		cancel()
		<-stop
		if len(runs) != 1 || runs[0]["key"] != key {
			t.Fatalf("round %d: took %v, want the run of %s", i, runs, key)
		}
		if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e", "run_id": runs[0]["run_id"], "result": 1}); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
	}
}
