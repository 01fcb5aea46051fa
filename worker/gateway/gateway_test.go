package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// fixture is a gateway on a fresh collection, served on loopback.
type fixture struct {
	t    *testing.T
	coll *mongo.Collection
	gw   *gateway.Gateway
	srv  *httptest.Server
	base string // the collection's URL
}

func newFixture(t *testing.T, cfg *gateway.Config) *fixture {
	t.Helper()
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &gateway.Config{}
	}
	if cfg.Collections == nil {
		cfg.Collections = []string{coll.Name()}
	}
	cfg.Consumer.PollInterval = 50 * time.Millisecond
	gw, err := gateway.New(coll.Database(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Stop(ctx)
		srv.Close()
	})
	return &fixture{t: t, coll: coll, gw: gw, srv: srv, base: srv.URL + "/v1/collections/" + coll.Name()}
}

// call sends a JSON request and decodes the JSON answer into a map.
func (f *fixture) call(method, path, token string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.base+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		f.t.Fatalf("%s %s: %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func TestTakeAndComplete(t *testing.T) {
	f := newFixture(t, nil)
	code, out := f.call("POST", "/tasks", "", map[string]any{"key": "k1", "params": map[string]any{"to": "ada"}})
	if code != 200 {
		t.Fatalf("publish: %d %v", code, out)
	}
	code, out = f.call("POST", "/take", "", map[string]any{"executor": "py-1", "max": 4, "wait_ms": 5000})
	runs, _ := out["runs"].([]any)
	if code != 200 || len(runs) != 1 {
		t.Fatalf("take: %d %v", code, out)
	}
	run := runs[0].(map[string]any)
	code, out = f.call("POST", "/complete", "", map[string]any{"executor": "py-1", "run_id": run["run_id"], "result": map[string]any{"sent": true}})
	if code != 200 || out["outcome"] != "succeeded" {
		t.Fatalf("complete: %d %v", code, out)
	}
	code, out = f.call("GET", "/tasks/k1", "", nil)
	if code != 200 || out["status"] != "succeeded" {
		t.Fatalf("get: %d %v", code, out)
	}
	t.Logf("%v", out)
}

// publish publishes tasks through the gateway, failing the test on error.
func (f *fixture) publish(tasks ...map[string]any) {
	f.t.Helper()
	if code, out := f.call("POST", "/tasks", "", map[string]any{"tasks": tasks}); code != 200 {
		f.t.Fatalf("publish: %d %v", code, out)
	}
}

// take takes up to n runs for an executor, waiting up to 10 s for one.
func (f *fixture) take(executor, session string, n int) []map[string]any {
	f.t.Helper()
	code, out := f.call("POST", "/take", "", map[string]any{"executor": executor, "session": session, "max": n, "wait_ms": 10000})
	if code != 200 {
		f.t.Fatalf("take: %d %v", code, out)
	}
	var runs []map[string]any
	for _, r := range out["runs"].([]any) {
		runs = append(runs, r.(map[string]any))
	}
	return runs
}

// doc reads a task document as stored.
func (f *fixture) doc(key string) map[string]any { return mschedulertest.Doc(f.t, f.coll, key) }

// TestStaleRunsAreRefused: a run's complete or renew after it ended, or
// with a run id never handed out, is 409 and changes nothing; another
// executor's call on a run is 403 and changes nothing.
func TestStaleRunsAreRefused(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "k"})
	runs := f.take("e1", "s1", 1)
	if len(runs) != 1 {
		t.Fatalf("took %d runs, want 1", len(runs))
	}
	id := runs[0]["run_id"]
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e2", "run_id": id}); code != 403 || out["field"] != "run_id" {
		t.Fatalf("another executor's complete: %d %v, want 403 on run_id", code, out)
	}
	if code, out := f.call("POST", "/renew", "", map[string]any{"executor": "e2", "run_ids": []any{id}}); code != 409 || len(out["lost"].([]any)) != 1 {
		t.Fatalf("another executor's renew: %d %v, want 409 with the run lost to it", code, out)
	}
	other := f.coll.Database().Collection(f.coll.Name() + "_other")
	t.Cleanup(func() {
		_ = other.Drop(context.Background())
		_ = f.coll.Database().Collection(other.Name() + ".meta").Drop(context.Background())
	})
	if err := mscheduler.EnsureIndexes(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	f2 := *f
	f2.base = f.srv.URL + "/v1/collections/" + other.Name()
	if code, out := f2.call("POST", "/complete", "", map[string]any{"executor": "e1", "run_id": id}); code != 409 {
		t.Fatalf("a complete through another collection's URL: %d %v, want 409", code, out)
	}
	if f.doc("k")["status"] != "running" {
		t.Fatalf("the task is %v after refused calls, want running", f.doc("k")["status"])
	}
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e1", "run_id": id, "result": 1}); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	before := f.doc("k")
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/complete", map[string]any{"executor": "e1", "run_id": id, "result": 2}},
		{"/fail", map[string]any{"executor": "e1", "run_id": id, "error": "late"}},
		{"/release", map[string]any{"executor": "e1", "run_id": id}},
		{"/renew", map[string]any{"executor": "e1", "run_ids": []any{id}}},
		{"/complete", map[string]any{"executor": "e1", "run_id": "never-handed-out"}},
	} {
		if code, out := f.call("POST", c.path, "", c.body); code != 409 {
			t.Fatalf("%s of a finished run: %d %v, want 409", c.path, code, out)
		}
	}
	after := f.doc("k")
	if after["rev"] != before["rev"] || after["status"] != "succeeded" {
		t.Fatalf("stale calls changed the task: rev %v → %v, status %v", before["rev"], after["rev"], after["status"])
	}
}

// TestOversizedResultIsRefused: a complete whose result is larger than the
// consumer's MaxResultBytes is 400 naming result, and writes nothing: the
// run is not failed (with max_failed_runs 1 that would fail the task for
// good) but still its executor's, which renews it and completes it again
// with a result that fits.
func TestOversizedResultIsRefused(t *testing.T) {
	const limit = 1 << 10
	f := newFixture(t, &gateway.Config{Consumer: mscheduler.ConsumerConfig{MaxResultBytes: limit}})
	f.publish(map[string]any{"key": "k", "max_failed_runs": 1})
	run := f.take("e", "s", 1)[0]
	id := run["run_id"]
	before := f.doc("k")
	code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e", "run_id": id, "attempt": run["attempt"], "result": strings.Repeat("x", limit)})
	if code != 400 || out["field"] != "result" || !strings.Contains(fmt.Sprint(out["error"]), fmt.Sprintf("MaxResultBytes (%d)", limit)) {
		t.Fatalf("complete with a result over MaxResultBytes: %d %v, want 400 on result naming the limit", code, out)
	}
	after := f.doc("k")
	if after["rev"] != before["rev"] || after["status"] != "running" || after["running"] != int32(1) || after["failed_runs"] != int32(0) || !heldBy(after, id) {
		t.Fatalf("the refused complete changed the task: %v → %v, want it running under run %v, no failed run", before, after, id)
	}
	if code, out := f.call("POST", "/renew", "", map[string]any{"executor": "e", "run_ids": []any{id}}); code != 200 {
		t.Fatalf("renew after the refused complete: %d %v, want the run still held", code, out)
	}
	code, out = f.call("POST", "/complete", "", map[string]any{"executor": "e", "run_id": id, "attempt": run["attempt"], "result": map[string]any{"sent": true}})
	if code != 200 || out["outcome"] != "succeeded" {
		t.Fatalf("complete with a result that fits: %d %v, want succeeded", code, out)
	}
	if d := f.doc("k"); d["status"] != "succeeded" || d["failed_runs"] != int32(0) {
		t.Fatalf("after the complete: status %v, failed_runs %v, want succeeded with none failed", d["status"], d["failed_runs"])
	}
}

// heldBy says a task document's holders hold the run.
func heldBy(doc map[string]any, runID any) bool {
	raw, err := bson.Marshal(doc["holders"])
	var holders map[string]struct {
		Run string `bson:"run"`
	}
	if err != nil || bson.Unmarshal(raw, &holders) != nil {
		return false
	}
	for _, h := range holders {
		if h.Run == runID {
			return true
		}
	}
	return false
}

// TestTokensAreIdentities: each token speaks for one executor and its
// groups: a run taken with one token cannot be completed with another, a
// body naming another executor or other groups is refused, and a request
// without a token or with an unknown one is 401.
func TestTokensAreIdentities(t *testing.T) {
	tokA, tokB := "token-of-a-0123456789", "token-of-b-0123456789"
	f := newFixture(t, &gateway.Config{Tokens: map[string]gateway.Executor{tokA: {ID: "a"}, tokB: {ID: "b", Groups: []string{"gpu"}}}})
	if code, _ := f.call("POST", "/tasks", "", map[string]any{"key": "k"}); code != 401 {
		t.Fatalf("publish without a token: %d, want 401", code)
	}
	if code, _ := f.call("POST", "/tasks", "wrong-token-0123456789", map[string]any{"key": "k"}); code != 401 {
		t.Fatalf("publish with an unknown token: %d, want 401", code)
	}
	if code, out := f.call("POST", "/tasks", tokA, map[string]any{"key": "k"}); code != 200 {
		t.Fatalf("publish: %d %v", code, out)
	}
	if code, out := f.call("POST", "/take", tokA, map[string]any{"executor": "b"}); code != 403 || out["field"] != "executor" {
		t.Fatalf("a take naming another executor: %d %v, want 403 on executor", code, out)
	}
	if code, out := f.call("POST", "/take", tokB, map[string]any{"groups": []string{"cpu"}}); code != 403 || out["field"] != "groups" {
		t.Fatalf("a take naming other groups: %d %v, want 403 on groups", code, out)
	}
	code, out := f.call("POST", "/take", tokA, map[string]any{"wait_ms": 10000})
	runs, _ := out["runs"].([]any)
	if code != 200 || len(runs) != 1 {
		t.Fatalf("take: %d %v", code, out)
	}
	id := runs[0].(map[string]any)["run_id"]
	if code, out := f.call("POST", "/complete", tokB, map[string]any{"run_id": id}); code != 403 {
		t.Fatalf("completing a's run with b's token: %d %v, want 403", code, out)
	}
	if code, out := f.call("POST", "/complete", tokA, map[string]any{"run_id": id}); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
}

// TestMalformedRequestsChangeNothing: each bad request is refused with the
// field it is about, and the collection is as it was.
func TestMalformedRequestsChangeNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "k"})
	before := f.doc("k")
	for _, c := range []struct {
		path  string
		body  any
		code  int
		field string
	}{
		{"/tasks", map[string]any{"key": "x", "colour": "red"}, 400, "body"},
		{"/tasks", map[string]any{"key": "x", "priority": "high"}, 400, "priority"},
		{"/tasks", map[string]any{"key": ""}, 400, "key"},
		{"/tasks", map[string]any{"tasks": []any{map[string]any{"key": "ok"}, map[string]any{"key": "bad", "concurrency": -1}}}, 400, "tasks[1].concurrency"},
		{"/tasks", map[string]any{"key": "x", "headers": map[string]any{"a.b": "1"}}, 400, `headers["a.b"]`},
		{"/tasks", map[string]any{"priority": 3, "tasks": []any{map[string]any{"key": "ok"}}}, 400, "tasks"},
		{"/tasks", map[string]any{"key": "x", "ping_interval_ms": 60000, "worker_timeout_ms": 1000}, 400, "ping_interval_ms"},
		{"/take", map[string]any{"executor": "e", "max": 100000}, 400, "max"},
		{"/take", map[string]any{"executor": "e", "wait_ms": -1}, 400, "wait_ms"},
		{"/take", map[string]any{"executor": "a.b"}, 400, "executor"},
		{"/take", map[string]any{"executor": "e", "groups": []string{"gpu", "a.b"}}, 400, "groups[1]"},
		{"/renew", map[string]any{"executor": "e"}, 400, "run_ids"},
		{"/complete", map[string]any{"executor": "e"}, 400, "run_id"},
		{"/complete", map[string]any{"executor": "e", "run_id": "r", "error": "x"}, 400, "error"},
		{"/fail", map[string]any{"executor": "e", "run_id": "r"}, 400, "error"},
		{"/release", map[string]any{"executor": "e", "run_id": "r", "result": 1}, 400, "result"},
	} {
		code, out := f.call("POST", c.path, "", c.body)
		if code != c.code || out["field"] != c.field {
			t.Errorf("POST %s %v: %d %v, want %d on %q", c.path, c.body, code, out, c.code, c.field)
		}
	}
	if n, err := f.coll.CountDocuments(t.Context(), map[string]any{}); err != nil || n != 1 {
		t.Fatalf("%d documents after bad requests (%v), want the 1 published", n, err)
	}
	if after := f.doc("k"); after["rev"] != before["rev"] || after["status"] != "pending" {
		t.Fatalf("bad requests changed the task: %v → %v", before, after)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.base+"/tasks", bytes.NewReader([]byte(`{"key":"x"}`)))
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 415 {
		t.Fatalf("a text/plain body: %v %v, want 415", resp, err)
	}
	if code, out := f.call("POST", "/../nope/tasks", "", map[string]any{"key": "x"}); code != 404 && code != 400 {
		t.Fatalf("an unknown collection: %d %v", code, out)
	}
}

// TestReturningExecutorGetsItsRunsBack: an executor that comes back with a
// new session gets its unfinished runs at once, delivery counted, and can
// complete them; a second executor takes nothing of them meanwhile.
func TestReturningExecutorGetsItsRunsBack(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "a"}, map[string]any{"key": "b"})
	first := f.take("e1", "boot-1", 2)
	if len(first) != 2 {
		t.Fatalf("took %d runs, want 2", len(first))
	}
	// e1 crashes and restarts: its new session's take returns the same runs.
	back := f.take("e1", "boot-2", 2)
	if len(back) != 2 {
		t.Fatalf("a returning executor got %d runs back, want 2", len(back))
	}
	// The old session is over: a second process sharing the id cannot
	// take the runs back, which would pass them back and forth.
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e1", "session": "boot-1", "wait_ms": 0}); code != 409 || out["field"] != "session" {
		t.Fatalf("a take from the earlier session: %d %v, want 409 on session", code, out)
	}
	ids := map[any]bool{first[0]["run_id"]: true, first[1]["run_id"]: true}
	for _, r := range back {
		if !ids[r["run_id"]] || r["delivery"] != float64(2) {
			t.Fatalf("returned run %v: want one of the runs taken before, on its second delivery", r)
		}
		if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e1", "run_id": r["run_id"]}); code != 200 || out["outcome"] != "succeeded" {
			t.Fatalf("complete after return: %d %v", code, out)
		}
	}
	for _, k := range []string{"a", "b"} {
		if st := f.doc(k)["status"]; st != "succeeded" {
			t.Fatalf("%s is %v, want succeeded", k, st)
		}
	}
}

// TestTakeAnswersWithEveryRunOfItsClaim: a take of three runs gets the
// three that one claim brings, though the handlers of two of them start
// 200 ms after the first, as on a busy machine where their goroutines
// wait for a core: the take waits for the runs it knows are on their
// way, not for a time sized for a quiet one.
func TestTakeAnswersWithEveryRunOfItsClaim(t *testing.T) {
	held := func(next mscheduler.RunFunc) mscheduler.RunFunc {
		return func(ctx context.Context, a *mscheduler.Attempt) error {
			if a.Key != "a" {
				<-time.After(200 * time.Millisecond)
			}
			return next(ctx, a)
		}
	}
	cfg := &gateway.Config{}
	cfg.Consumer.Middleware = []mscheduler.Middleware{held}
	f := newFixture(t, cfg)
	f.publish(map[string]any{"key": "a"}, map[string]any{"key": "b"}, map[string]any{"key": "c"})
	if runs := f.take("e1", "s", 3); len(runs) != 3 {
		t.Fatalf("took %d runs, want the 3 of the claim", len(runs))
	}
}

// TestSilentExecutorLosesItsRun: a run whose executor stops renewing
// fails when its lease passes, saying so, and another executor takes the
// task's next run.
func TestSilentExecutorLosesItsRun(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "k", "worker_timeout_ms": 1500, "ping_interval_ms": 500, "max_retries": -1, "retry_delay_ms": 1})
	gone := f.take("quiet", "s", 1)
	if len(gone) != 1 {
		t.Fatalf("took %d runs, want 1", len(gone))
	}
	next := f.take("e2", "s", 1) // waits until the silent one's run failed and the task is claimable again
	if len(next) != 1 || next[0]["run_id"] == gone[0]["run_id"] {
		t.Fatalf("the second executor took %v, want a new run", next)
	}
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "quiet", "run_id": gone[0]["run_id"]}); code != 409 {
		t.Fatalf("the silent executor's late complete: %d %v, want 409", code, out)
	}
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e2", "run_id": next[0]["run_id"]}); code != 200 {
		t.Fatalf("complete: %d %v", code, out)
	}
	code, out := f.call("GET", "/tasks/k", "", nil)
	runs, _ := out["runs"].([]any)
	if code != 200 || len(runs) != 2 {
		t.Fatalf("get: %d %v, want two runs", code, out)
	}
	if r := runs[0].(map[string]any); r["outcome"] != "failed" || !strings.Contains(r["error"].(string), `executor "quiet" did not renew`) {
		t.Fatalf("the silent executor's run: %v, want failed naming it", r)
	}
}

// TestFailRetriesAndRelease: a failure with retries left is retried (the
// next take gets attempt 2 of the same run), a failure without retry
// fails the run, and a release gives the task back without a failure.
func TestFailRetriesAndRelease(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "r", "max_retries": 1, "retry_delay_ms": 1}, map[string]any{"key": "n", "priority": -1})
	run := f.take("e", "s", 1)[0]
	if run["key"] != "r" {
		t.Fatalf("took %v first, want r (higher priority)", run["key"])
	}
	if code, out := f.call("POST", "/fail", "", map[string]any{"executor": "e", "run_id": run["run_id"], "error": "flaky"}); code != 200 || out["outcome"] != "retrying" {
		t.Fatalf("fail with retries left: %d %v, want retrying", code, out)
	}
	again := f.take("e", "s", 1)[0]
	if again["run_id"] != run["run_id"] || again["attempt"] != float64(2) {
		t.Fatalf("after a retried failure took %v, want attempt 2 of run %v", again, run["run_id"])
	}
	// A late call about attempt 1 does not end attempt 2, taken by the
	// same executor under the same run id.
	if code, out := f.call("POST", "/complete", "", map[string]any{"executor": "e", "run_id": run["run_id"], "attempt": 1}); code != 409 || out["field"] != "attempt" {
		t.Fatalf("complete of attempt 1 while attempt 2 runs: %d %v, want 409 on attempt", code, out)
	}
	if code, out := f.call("POST", "/release", "", map[string]any{"executor": "e", "run_id": again["run_id"]}); code != 200 || out["outcome"] != "released" {
		t.Fatalf("release: %d %v", code, out)
	}
	// The task is pending again, unless the gateway's consumer claimed it
	// again at once for no taker (see the README: a take does not yet
	// claim for its executor alone): what the release must show is its
	// record, and no failure.
	if d := f.doc("r"); d["failed_runs"] != int32(0) || outcomeOf(d, again["run_id"]) != "released" || d["status"] != "pending" && d["status"] != "running" {
		t.Fatalf("after a release: status %v, failed_runs %v, run recorded %q; want it given back, with no failure", d["status"], d["failed_runs"], outcomeOf(d, again["run_id"]))
	}
	for range 2 { // r again, then n
		run = f.take("e", "s", 1)[0]
		if code, out := f.call("POST", "/fail", "", map[string]any{"executor": "e", "run_id": run["run_id"], "error": "bad input", "retry": false}); code != 200 || out["outcome"] != "failed" {
			t.Fatalf("fail without retry: %d %v, want failed", code, out)
		}
	}
}

// outcomeOf is the outcome a task document records for a run, or "".
func outcomeOf(doc map[string]any, runID any) string {
	runs, _ := doc["runs"].(bson.A)
	for _, r := range runs {
		var m map[string]any
		switch v := r.(type) {
		case bson.M:
			m = v
		case bson.D:
			m = map[string]any{}
			for _, e := range v {
				m[e.Key] = e.Value
			}
		}
		if m["run_id"] == runID {
			out, _ := m["outcome"].(string)
			return out
		}
	}
	return ""
}

// TestParamsSchemaIsCheckedAtTheDoor: with a params schema on the
// collection, a publish whose params break it is refused naming the field,
// and nothing is written.
func TestParamsSchemaIsCheckedAtTheDoor(t *testing.T) {
	f := newFixture(t, nil)
	schema := `{"type":"object","required":["to"],"properties":{"to":{"type":"string","format":"email"},"retries":{"type":"integer"}}}`
	if err := mscheduler.SetParamsSchema(t.Context(), f.coll, []byte(schema)); err != nil {
		t.Fatal(err)
	}
	code, out := f.call("POST", "/tasks", "", map[string]any{"key": "bad", "params": map[string]any{"to": "ada@example.com", "retries": "three"}})
	if code != 400 || !strings.HasPrefix(out["field"].(string), "params") || !strings.Contains(out["error"].(string), "retries") {
		t.Fatalf("params against the schema: %d %v, want 400 on params naming retries", code, out)
	}
	if n, err := f.coll.CountDocuments(t.Context(), map[string]any{}); err != nil || n != 0 {
		t.Fatalf("%d documents after a refused publish (%v), want 0", n, err)
	}
	if code, out := f.call("POST", "/tasks", "", map[string]any{"key": "good", "params": map[string]any{"to": "ada@example.com"}}); code != 200 {
		t.Fatalf("params that fit: %d %v", code, out)
	}
}

// TestTooManyWaitingTakes: takes beyond MaxWaiting are refused with 429
// while the others wait, a take that does not wait is not, and a stopping
// gateway ends the waiting ones.
func TestTooManyWaitingTakes(t *testing.T) {
	f := newFixture(t, &gateway.Config{MaxWaiting: 1})
	waited := make(chan int, 1)
	go func() {
		code, _ := f.call("POST", "/take", "", map[string]any{"executor": "e1", "wait_ms": 60000})
		waited <- code
	}()
	untilWaiting(t, f.gw, 1)
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e2", "wait_ms": 1000}); code != 429 {
		t.Fatalf("a take that would wait beside a waiting one: %d %v, want 429", code, out)
	}
	if code, out := f.call("POST", "/take", "", map[string]any{"executor": "e3", "wait_ms": 0}); code != 200 {
		t.Fatalf("a take that does not wait, beside a waiting one: %d %v, want 200", code, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.gw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-waited; code != 200 {
		t.Fatalf("the waiting take ended with %d on Stop, want 200 and no runs", code)
	}
}

// TestExecutorsAreInTheRegistry: an executor that takes is announced in
// the worker registry, with the runs it holds and its capacity (the
// largest max of its takes), as worker processes are, and leaves it when
// the gateway stops.
func TestExecutorsAreInTheRegistry(t *testing.T) {
	f := newFixture(t, &gateway.Config{HeartbeatInterval: 50 * time.Millisecond})
	f.publish(map[string]any{"key": "k"})
	runs := f.take("py-7", "s", 3)
	if len(runs) != 1 {
		t.Fatalf("took %d runs, want 1", len(runs))
	}
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for {
		ws, err := mscheduler.ListWorkers(t.Context(), f.coll.Database())
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == "py-7" && w.Running == 1 && w.Capacity == 3 && !w.Stale && slices.Contains(w.Collections, f.coll.Name()) && strings.Contains(w.Version, "gateway") &&
				slices.Equal(w.RunIDs, []string{runs[0]["run_id"].(string)}) {
				stopLeavesRegistry(t, f, "py-7")
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the executor is not in the registry holding its run: %+v", ws)
		}
	}
}

// stopLeavesRegistry stops the gateway and checks that the executor left
// the registry, its runs released, rather than staying with its last
// running count until it went stale.
func stopLeavesRegistry(t *testing.T, f *fixture, executor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := f.gw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ws, err := mscheduler.ListWorkers(t.Context(), f.coll.Database())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == executor {
			t.Errorf("after Stop, the executor is still in the registry: %+v", w)
		}
	}
}

// TestUntakenRetryStillFails: a retry that no executor takes does not wipe
// out the failure before it: the run fails with that failure, counting
// towards MaxFailedRuns, rather than being released to start again.
func TestUntakenRetryStillFails(t *testing.T) {
	f := newFixture(t, &gateway.Config{UntakenHold: 100 * time.Millisecond})
	f.publish(map[string]any{"key": "k", "max_retries": 1, "retry_delay_ms": 1, "max_failed_runs": 1})
	run := f.take("e", "s", 1)[0]
	if code, out := f.call("POST", "/fail", "", map[string]any{"executor": "e", "run_id": run["run_id"], "error": "disk full"}); code != 200 || out["outcome"] != "retrying" {
		t.Fatalf("fail: %d %v, want retrying", code, out)
	}
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for f.doc("k")["status"] != "failed" {
		if time.Now().After(deadline) {
			t.Fatalf("the task is %v, want failed once its retry went untaken", f.doc("k")["status"])
		}
	}
	_, out := f.call("GET", "/tasks/k", "", nil)
	runs := out["runs"].([]any)
	if r := runs[len(runs)-1].(map[string]any); r["outcome"] != "failed" || !strings.Contains(r["error"].(string), "disk full") {
		t.Fatalf("the run: %v, want failed with the executor's error", r)
	}
}

// TestCrossSiteRequestsAreRefused: a page of another site in a browser on
// this machine cannot act through a gateway without tokens: browsers mark
// its requests, and they are refused before anything is read or written.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	f := newFixture(t, nil)
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://attacker.example"}} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", f.base+"/tasks", strings.NewReader(`{"key":"x"}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site POST with %v: %d, want 403", h, resp.StatusCode)
		}
	}
	if n, err := f.coll.CountDocuments(t.Context(), map[string]any{}); err != nil || n != 0 {
		t.Fatalf("%d documents after cross-site POSTs (%v), want 0", n, err)
	}
}

// TestEveryAnswerRefusesFraming: answers of every kind, a refusal of the
// host included, carry the headers that refuse framing and sniffing, as
// the dashboard's do; an allowed host that is not a host name is refused
// by name at New.
func TestEveryAnswerRefusesFraming(t *testing.T) {
	f := newFixture(t, nil)
	for _, c := range []struct{ method, path, host string }{
		{"GET", "/openapi.json", ""}, {"GET", "/tasks/none", ""}, {"POST", "/tasks", "rebind.example"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), c.method, f.base+c.path, strings.NewReader(`{"key":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Content-Security-Policy") != "frame-ancestors 'none'" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (Host %q): %d with headers %v, want framing and sniffing refused", c.method, c.path, c.host, resp.StatusCode, resp.Header)
		}
	}
	_, err := gateway.New(mschedulertest.Client().Database(mschedulertest.Database), &gateway.Config{Collections: []string{"tasks"}, AllowedHosts: []string{"http://gw.internal:8090"}})
	if err == nil || !strings.Contains(err.Error(), "AllowedHosts[0]") {
		t.Errorf("an allowed host with a scheme and a port: %v, want an error naming AllowedHosts[0]", err)
	}
}

// TestRunEndingInItsRetryDelayIsNotOwed: a run cancelled while it waits
// out its retry delay is no longer counted in what the pool holds for
// takers, which would otherwise claim a run nobody asked for.
func TestRunEndingInItsRetryDelayIsNotOwed(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "r", "max_retries": 1, "retry_delay_ms": 60_000, "ping_interval_ms": 100})
	run := f.take("e", "s", 1)[0]
	if code, out := f.call("POST", "/fail", "", map[string]any{"executor": "e", "run_id": run["run_id"], "error": "flaky"}); code != 200 || out["outcome"] != "retrying" {
		t.Fatalf("fail with retries left: %d %v, want retrying", code, out)
	}
	if d := gateway.Demand(f.gw, f.coll.Name(), "e"); d != 1 {
		t.Fatalf("demand in the retry delay: %d, want 1 (the run owed to a taker)", d)
	}
	if code, out := f.call("POST", "/tasks/r/cancel", "", nil); code != 200 {
		t.Fatalf("cancel: %d %v", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for gateway.Demand(f.gw, f.coll.Name(), "e") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("demand %d 30 s after the run was cancelled in its retry delay, want 0; task %v", gateway.Demand(f.gw, f.coll.Name(), "e"), f.doc("r"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartedPoolServesAnEndedRequest: once a collection's pool is
// started, a take whose request already ended (its server shutting down)
// is served by it, to answer with no run; it used to get a 503 at random,
// as a select chose between the pool being ready and the request ending.
func TestStartedPoolServesAnEndedRequest(t *testing.T) {
	f := newFixture(t, nil)
	f.publish(map[string]any{"key": "k"})
	if runs := f.take("e", "s", 1); len(runs) != 1 {
		t.Fatalf("took %d runs, want 1", len(runs))
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 64 {
		if !gateway.PoolServed(ended, f.gw, f.coll.Name(), "e") {
			t.Fatalf("try %d: the started pool refused a request that had ended", i)
		}
	}
}
