// Package python_test runs the Python client of the gateway
// (mscheduler_gateway.py) and its example against a gateway in the test.
package python_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
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

// startGateway serves a gateway on a fresh collection on loopback; it
// returns the collection and the gateway's URL.
func startGateway(t *testing.T, cfg *gateway.Config) (*mongo.Collection, string) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	cfg.Consumer.PollInterval = 50 * time.Millisecond
	cfg.Collections = []string{coll.Name()}
	gw, err := gateway.New(coll.Database(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Stop(ctx); err != nil {
			t.Errorf("stop the gateway: %v", err)
		}
		srv.Close()
	})
	return coll, srv.URL
}

// python runs python3 in this directory with args, and returns its output.
func python(t *testing.T, args ...string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not on PATH (%v): these tests run the Python client, install python3 (3.9 or later)", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	var stdout bytes.Buffer
	var stderr mschedulertest.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python3 %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if s := stderr.String(); s != "" {
		t.Logf("python3 %s, stderr:\n%s", args[0], s)
	}
	return stdout.String()
}

func assertLines(t *testing.T, got string, want ...string) {
	t.Helper()
	if g, w := strings.TrimRight(got, "\n"), strings.Join(want, "\n"); g != w {
		t.Fatalf("output:\n%s\nwant:\n%s", g, w)
	}
}

func TestPythonExampleEndToEnd(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{})
	out := python(t, "example.py", url, coll.Name())
	assertLines(t, out,
		`resize-1 succeeded attempts=1 {"area": 100}`,
		`resize-2 succeeded attempts=2 {"area": 400}`,
		`resize-3 succeeded attempts=1 {"area": 900}`,
		`resize-4 failed attempts=1 width must be positive, got 0`,
	)

	// The task documents say the same, read through the library.
	prod, err := mscheduler.NewProducer[bson.RawValue](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]struct {
		status   mscheduler.Status
		attempts int
		area     int
		err      string
	}{
		"resize-1": {mscheduler.StatusSucceeded, 1, 100, ""},
		"resize-2": {mscheduler.StatusSucceeded, 2, 400, ""},
		"resize-3": {mscheduler.StatusSucceeded, 1, 900, ""},
		"resize-4": {mscheduler.StatusFailed, 1, 0, "width must be positive, got 0"},
	} {
		info, err := prod.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		last, ok := info.LastRun()
		if info.Status != want.status || !ok || last.Attempts != want.attempts || last.Error != want.err {
			t.Errorf("%s: status %s, last run %+v; want %s, %d attempts, error %q", key, info.Status, last, want.status, want.attempts, want.err)
			continue
		}
		if last.WorkerID == "" {
			t.Errorf("%s: the last run has no worker id", key)
		}
		if want.status != mscheduler.StatusSucceeded {
			if info.FailedRuns != 1 || info.Succeeded != 0 {
				t.Errorf("%s: %d failed runs, %d succeeded; want 1, 0", key, info.FailedRuns, info.Succeeded)
			}
			continue
		}
		var result struct {
			Area int `bson:"area"`
		}
		if err := last.Result.Unmarshal(&result); err != nil || result.Area != want.area {
			t.Errorf("%s: result %v (%v), want area %d", key, last.Result, err, want.area)
		}
		if info.Succeeded != 1 || info.FailedRuns != 0 {
			t.Errorf("%s: %d succeeded, %d failed runs; want 1, 0", key, info.Succeeded, info.FailedRuns)
		}
	}
}

func TestPythonClientWithTokens(t *testing.T) {
	const tokenA, tokenB = "py-a-0123456789abcdef0123456789ab", "py-b-0123456789abcdef0123456789ab"
	coll, url := startGateway(t, &gateway.Config{Tokens: map[string]gateway.Executor{
		tokenA: {ID: "py-a"},
		tokenB: {ID: "py-b"},
	}})
	out := python(t, "token_check.py", url, coll.Name(), tokenA, tokenB)
	assertLines(t, out,
		"publish: inserted",
		"take: t-1/attempt=1/delivery=1",
		"no token: 401 token",
		"wrong token: 401 token",
		"renew by py-b: lost [True]",
		"complete by py-b: 403 run_id",
		"renew by py-a: True",
		"complete by py-a: succeeded",
		"complete again: 409 run_id",
		"status: succeeded",
	)
	prod, err := mscheduler.NewProducer[bson.RawValue](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := prod.Get(t.Context(), "t-1")
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := info.LastRun(); !ok || last.Outcome != mscheduler.OutcomeSucceeded || last.Result.Document().Lookup("by").StringValue() != "a" {
		t.Fatalf("t-1: last run %+v, want succeeded with {by: a}", last)
	}
}

// TestPythonRestartedExecutorGetsItsRunBack runs an executor that takes a
// run and exits without ending it, then the same executor again: its new
// session gets the run back at once, and it completes it.
func TestPythonRestartedExecutorGetsItsRunBack(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{})
	const prelude = "import sys; from mscheduler_gateway import Gateway; gw = Gateway(sys.argv[1], sys.argv[2], executor='py-restart')\n"
	first := python(t, "-c", prelude+
		"gw.publish('job', {'n': 1})\n"+
		"r = gw.take(wait_ms=10000)[0]\n"+
		"print(r.key, r.run_id, r.delivery)",
		url, coll.Name())
	key, runID, _ := strings.Cut(strings.TrimSpace(first), " ")
	runID, delivery, _ := strings.Cut(runID, " ")
	if key != "job" || delivery != "1" {
		t.Fatalf("first process: %q", first)
	}
	second := python(t, "-c", prelude+
		"r = gw.take(wait_ms=0)[0]\n"+
		"print(r.key, r.run_id, r.delivery, gw.complete(r.run_id, {'n': 2}))",
		url, coll.Name())
	assertLines(t, second, "job "+runID+" 2 succeeded")
}

// TestPythonClientCalls runs every call of the client once: publish (one,
// again, many, refused), get (a key to escape, a missing one), list,
// cancel, take, release, fail without retry, and complete with no result.
func TestPythonClientCalls(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{})
	out := python(t, "-c", `
import sys
from mscheduler_gateway import Gateway, GatewayError
gw = Gateway(sys.argv[1], sys.argv[2], executor="py-calls")

def answer(call):
    try:
        return call()
    except GatewayError as err:
        return f"{err.status} {err.field}"

def take_all(keys):
    runs = {}
    while set(runs) != set(keys):
        runs.update((r.key, r) for r in gw.take(max=len(keys), wait_ms=10000))
    return runs

print("publish:", gw.publish("a/b c", {"x": 1}, priority=5, tags=["t"]))
print("publish again:", gw.publish("a/b c", {"x": 1}, priority=5, tags=["t"]))
print("publish many:", [r["outcome"] for r in gw.publish_many([{"key": "k2"}, {"key": "k3", "max_failed_runs": 1}])])
print("refused:", answer(lambda: gw.publish("k4", worker_timeout_ms=100, ping_interval_ms=200)))
task = gw.get("a/b c")
print("get:", task["key"], task["status"], task["priority"], task["params"], task["tags"])
print("get missing:", answer(lambda: gw.get("k4")))
print("list:", [t["key"] for t in gw.list(status="pending")])
print("list page:", [t["key"] for t in gw.list(status=["pending", "cancelled"], limit=1, after="a/b c")])
print("cancel:", gw.cancel("k2")["status"])
print("cancel again:", answer(lambda: gw.cancel("k2")))
runs = take_all(["a/b c", "k3"])
print("release:", gw.release(runs["a/b c"].run_id))
print("fail:", gw.fail(runs["k3"].run_id, "bad input", retry=False))
again = take_all(["a/b c"])["a/b c"]
print("complete:", gw.complete(again.run_id))
for t in gw.list():
    last = (gw.get(t["key"]).get("runs") or [{}])[-1]
    print(t["key"], t["status"], last.get("outcome"), last.get("error"), last.get("result"))
`, url, coll.Name())
	assertLines(t, out,
		"publish: inserted",
		"publish again: unchanged",
		"publish many: ['inserted', 'inserted']",
		"refused: 400 ping_interval_ms",
		"get: a/b c pending 5 {'x': 1} ['t']",
		"get missing: 404 key",
		"list: ['a/b c', 'k2', 'k3']",
		"list page: ['k2']",
		"cancel: cancelled",
		"cancel again: 409 key",
		"release: released",
		"fail: failed",
		"complete: succeeded",
		"a/b c succeeded succeeded None None",
		"k2 cancelled None None None",
		"k3 failed failed bad input None",
	)
}

// TestPythonServeRenewsLongRuns serves two runs that last two and a half
// of their leases each: serve renews them (together), and, stopped by the
// handlers, returns once it has completed them.
func TestPythonServeRenewsLongRuns(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{})
	out := python(t, "-c", `
import sys, threading, time
from mscheduler_gateway import Gateway
gw = Gateway(sys.argv[1], sys.argv[2], executor="py-slow")
for key in ("slow-1", "slow-2"):
    gw.publish(key, ping_interval_ms=100, worker_timeout_ms=1000, max_retries=-1)

batches = []
renew = gw.renew
gw.renew = lambda ids: batches.append(len(ids)) or renew(ids)
started = threading.Barrier(2)
stop = threading.Event()

def handler(run):
    started.wait(timeout=30)
    time.sleep(2.5)  # the work: two and a half leases
    stop.set()
    return {"lease_ms": run.lease_ms, "renew_every_ms": run.renew_every_ms}

gw.serve(handler, concurrency=2, stop=stop, wait_ms=1000)
print("renewed both at once:", max(batches) == 2)
for key in ("slow-1", "slow-2"):
    task = gw.get(key)
    last = task["runs"][-1]
    print(key, task["status"], task["failed_runs"], last["attempts"], last["result"])
`, url, coll.Name())
	assertLines(t, out,
		"renewed both at once: True",
		"slow-1 succeeded 0 1 {'lease_ms': 1000, 'renew_every_ms': 100}",
		"slow-2 succeeded 0 1 {'lease_ms': 1000, 'renew_every_ms': 100}",
	)
}

// TestPythonServeFailsARefusedResult: a handler's result over the
// gateway's MaxResultBytes is refused, the run still the executor's; serve
// fails it at once with the gateway's reason, rather than leaving it to
// lapse unrenewed.
func TestPythonServeFailsARefusedResult(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{Consumer: mscheduler.ConsumerConfig{MaxResultBytes: 1 << 10}})
	out := python(t, "-c", `
import sys, threading
from mscheduler_gateway import Gateway
gw = Gateway(sys.argv[1], sys.argv[2], executor="py-big")
gw.publish("big", max_failed_runs=1)
stop = threading.Event()

def handler(run):
    stop.set()
    return "x" * 2048

gw.serve(handler, stop=stop, wait_ms=1000)
task = gw.get("big")
last = task["runs"][-1]
print(task["status"], task["failed_runs"], last["outcome"], "MaxResultBytes (1024)" in last["error"])
`, url, coll.Name())
	assertLines(t, out, "failed 1 failed True")
}

// TestPythonIdleServeStopsWithinATake: an idle serve asked to wait up to
// a minute for work takes a second at a time, so that a stop is heard
// after the take going on, not after the minute.
func TestPythonIdleServeStopsWithinATake(t *testing.T) {
	coll, url := startGateway(t, &gateway.Config{})
	out := python(t, "-c", `
import sys, threading
from mscheduler_gateway import Gateway
gw = Gateway(sys.argv[1], sys.argv[2], executor="py-idle")
waits = []
take = gw.take
stop = threading.Event()

def counted(max=1, wait_ms=0):
    waits.append(wait_ms)
    if len(waits) == 2:
        stop.set()
    return take(max=max, wait_ms=wait_ms)

gw.take = counted
gw.serve(lambda run: None, stop=stop, wait_ms=60000)
print("takes:", len(waits), "longest wait_ms:", max(waits))
`, url, coll.Name())
	assertLines(t, out, "takes: 2 longest wait_ms: 1000")
}
