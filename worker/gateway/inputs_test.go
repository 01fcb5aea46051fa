package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

// TestOutOfRangeInputsAre400: every duration of a request is bounded, and
// a value beyond it (one that wrapped around as a time.Duration, once) is
// refused naming the field; params the server will not store are the
// request's fault (400), not the server's (503), and so is a group name
// no query can match. Nothing is stored.
func TestOutOfRangeInputsAre400(t *testing.T) {
	f := newFixture(t, nil)
	const huge = 18446744073711
	for _, c := range []struct {
		path  string
		body  map[string]any
		field string
	}{
		{"/tasks", map[string]any{"key": "a", "worker_timeout_ms": huge}, "worker_timeout_ms"},
		{"/tasks", map[string]any{"key": "a", "ping_interval_ms": huge - 1}, "ping_interval_ms"},
		{"/tasks", map[string]any{"key": "a", "retry_delay_ms": 31536000001}, "retry_delay_ms"},
		{"/tasks", map[string]any{"key": "a", "timeout_ms": -1}, "timeout_ms"},
		{"/tasks", map[string]any{"tasks": []any{map[string]any{"key": "a"}, map[string]any{"key": "b", "worker_timeout_ms": huge}}}, "tasks[1].worker_timeout_ms"},
		{"/take", map[string]any{"executor": "e", "wait_ms": huge - 1}, "wait_ms"},
		{"/tasks", map[string]any{"key": "a", "group": "$all"}, "group"},
		{"/tasks", map[string]any{"key": "a", "group": "a\x00b"}, "group"},
	} {
		code, out := f.call("POST", c.path, "", c.body)
		if code != 400 || out["field"] != c.field {
			t.Errorf("POST %s %v: %d %v, want 400 naming %s", c.path, c.body, code, out, c.field)
		}
	}
	for _, params := range []any{map[string]any{"$where": "1"}, map[string]any{"a": map[string]any{"$inc": 1}}, map[string]any{"grid": []any{[]any{1, 2}, []any{3}}}} {
		code, out := f.call("POST", "/tasks", "", map[string]any{"key": "p", "params": params})
		if code != 400 {
			t.Errorf("params %v: %d %v, want 400", params, code, out)
		}
		if msg, _ := out["error"].(string); strings.Contains(msg, "topology") {
			t.Errorf("params %v: the answer shows the driver's detail: %q", params, msg)
		}
	}
	if code, out := f.call("GET", "/tasks", "", nil); code != 200 || len(out["tasks"].([]any)) != 0 {
		t.Errorf("tasks after refused publishes: %d %v, want none", code, out)
	}
}

// TestOneExecutorCannotHoldEveryWaitingPlace: an executor has at most
// MaxWaitingPerExecutor takes waiting; beyond them it is refused with 429
// while another executor still gets a place.
func TestOneExecutorCannotHoldEveryWaitingPlace(t *testing.T) {
	f := newFixture(t, &gateway.Config{MaxWaiting: 4, MaxWaitingPerExecutor: 2})
	waited := make(chan int, 3)
	wait := func(executor string) {
		go func() {
			code, _ := f.call("POST", "/take", "", map[string]any{"executor": executor, "wait_ms": 60000})
			waited <- code
		}()
	}
	wait("e1")
	wait("e1")
	untilWaiting(t, f.gw, 2)
	code, out := f.call("POST", "/take", "", map[string]any{"executor": "e1", "wait_ms": 1000})
	if msg, _ := out["error"].(string); code != 429 || !strings.Contains(msg, "MaxWaitingPerExecutor") {
		t.Errorf("a third waiting take of e1: %d %v, want 429 naming MaxWaitingPerExecutor", code, out)
	}
	wait("e2")
	untilWaiting(t, f.gw, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.gw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code := <-waited; code != 200 {
			t.Errorf("a waiting take ended with %d on Stop, want 200", code)
		}
	}
}

// TestConsumersAreBounded: each executor, collection and set of groups
// runs a consumer; a take that would start one beyond MaxPools is refused
// with 429 naming the executor, while those already served go on.
func TestConsumersAreBounded(t *testing.T) {
	f := newFixture(t, &gateway.Config{MaxPools: 2})
	for _, c := range []struct {
		executor string
		groups   []string
		code     int
	}{{"e", []string{"a"}, 200}, {"e", []string{"b"}, 200}, {"e", []string{"c"}, 429}, {"e2", []string{"a"}, 429}, {"e", []string{"a"}, 200}} {
		code, out := f.call("POST", "/take", "", map[string]any{"executor": c.executor, "groups": c.groups, "wait_ms": 0})
		if code != c.code || (code == 429 && out["field"] != "executor") {
			t.Errorf("take of %s for groups %v: %d %v, want %d", c.executor, c.groups, code, out, c.code)
		}
	}
}

// untilWaiting returns once n takes wait in gw; the gateway announces no
// such event, so it looks every few milliseconds.
func untilWaiting(t *testing.T, gw *gateway.Gateway, n int) {
	t.Helper()
	for deadline := time.Now().Add(mschedulertest.WaitTimeout); gateway.Waiting(gw) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("takes waiting: %d, want %d", gateway.Waiting(gw), n)
		}
	}
}

// TestTakeCarriesThePlannedTime: a run of a task with a plan is handed to
// its executor with the planned time of its occurrence, as a Go handler
// sees it (Run.PlannedAt); a run of a task without a plan has none.
func TestTakeCarriesThePlannedTime(t *testing.T) {
	f := newFixture(t, nil)
	p, err := mscheduler.NewProducer[int](f.coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := mscheduler.Every(1, mscheduler.Hour)
	plan.Start = time.Now().Truncate(time.Second) // due now, within its grace
	if _, err := p.Publish(t.Context(), mscheduler.Task[int]{Key: "planned", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	f.publish(map[string]any{"key": "plain", "priority": -1})
	for _, want := range []struct {
		key     string
		planned bool
	}{{"planned", true}, {"plain", false}} {
		runs := f.take("e", "s", 1)
		if len(runs) != 1 || runs[0]["key"] != want.key {
			t.Fatalf("took %v, want a run of %s", runs, want.key)
		}
		at, has := runs[0]["planned_at"].(string)
		switch {
		case has != want.planned:
			t.Errorf("run of %s: planned_at %v, want it only for a planned task", want.key, runs[0]["planned_at"])
		case has:
			if got, err := time.Parse(time.RFC3339Nano, at); err != nil || !got.Equal(plan.Start) {
				t.Errorf("run of %s: planned_at %q (%v), want %s", want.key, at, err, plan.Start.UTC().Format(time.RFC3339))
			}
		}
		if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e", "run_id": runs[0]["run_id"]}); code != 200 {
			t.Fatalf("complete: %d %v", code, out)
		}
	}
}

// TestTakeThatDoesNotWaitGetsWhatIsDue: a take with wait_ms 0 claims what
// is due when it comes, up to its max, and returns those runs; once none
// is due, it returns none at once.
func TestTakeThatDoesNotWaitGetsWhatIsDue(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "a"}, map[string]any{"key": "b"}, map[string]any{"key": "c"})
	got := map[string]bool{}
	for _, want := range []int{2, 1, 0} {
		code, out := f.call("POST", "/take", "", map[string]any{"executor": "e", "max": 2, "wait_ms": 0})
		runs, _ := out["runs"].([]any)
		if code != 200 || len(runs) != want {
			t.Fatalf("take of up to 2, not waiting, with %d due: %d %v, want %d runs", 3-len(got), code, out, want)
		}
		for _, r := range runs {
			got[r.(map[string]any)["key"].(string)] = true
		}
	}
	if len(got) != 3 {
		t.Errorf("runs taken of %v, want a, b and c", got)
	}
}

// TestAWaitingTakeGetsTheRunsClaimedForIt: a take waiting for up to 8 runs
// when 3 tasks come gets all 3 in its answer: the consumer claims them one
// after another, and the take answers once that look has ended, rather
// than with the first and leaving the others claimed for no one (they
// were released unrun after UntakenHold).
func TestAWaitingTakeGetsTheRunsClaimedForIt(t *testing.T) {
	f := newFixture(t, nil)
	taken := make(chan []any, 1)
	go func() {
		_, out := f.call("POST", "/take", "", map[string]any{"executor": "e", "max": 8, "wait_ms": 10000})
		runs, _ := out["runs"].([]any)
		taken <- runs
	}()
	untilWaiting(t, f.gw, 1)
	f.publish(map[string]any{"key": "a"}, map[string]any{"key": "b"}, map[string]any{"key": "c"})
	if runs := <-taken; len(runs) != 3 {
		t.Errorf("a take of up to 8 answered with %d runs of the 3 that came, want 3: %v", len(runs), runs)
	}
}
