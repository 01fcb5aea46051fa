package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// childWorkerEnv makes the test binary a worker process of the collection
// it names, with a 200 ms heartbeat, for a test to SIGKILL.
const childWorkerEnv = "MSCHEDULER_TEST_CHILD_WORKER"

func runChildWorker() int {
	w, err := worker.New(context.Background(), worker.Config{
		WorkerID: "child", HeartbeatInterval: 200 * time.Millisecond, Database: testDatabase,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		err = worker.Register(w, os.Getenv(childWorkerEnv), add, nil)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go func() {
		<-w.Ready()
		fmt.Println("ready")
	}()
	if err := w.Run(context.Background()); err != nil {
		fmt.Println("error", err)
		return 1
	}
	return 0
}

// findWorker reads the registry entry of id, or nil.
func findWorker(t *testing.T, id string) *mscheduler.WorkerInfo {
	t.Helper()
	ws, err := mscheduler.ListWorkers(context.Background(), mschedulertest.Client().Database(testDatabase))
	if err != nil {
		t.Fatal(err)
	}
	for i := range ws {
		if ws[i].ID == id {
			return &ws[i]
		}
	}
	return nil
}

// waitWorker polls the registry until cond holds for the entry of id (nil
// when absent): a heartbeat announces nothing to wait on.
func waitWorker(t *testing.T, id, what string, cond func(*mscheduler.WorkerInfo) bool) *mscheduler.WorkerInfo {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		w := findWorker(t, id)
		if cond(w) {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s never %s (last seen: %+v)", id, what, w)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRegistry: a running worker process is listed with what it runs; a
// SIGKILLed one is reported stale after three missed heartbeats; a worker
// that stops cleanly is removed.
func TestRegistry(t *testing.T) {
	name := collectionName(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childWorkerEnv+"="+name, worker.EnvURI+"="+mschedulertest.URI())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child worker said %q (%v)", line, err)
	}
	child := waitWorker(t, "child", "announced itself", func(w *mscheduler.WorkerInfo) bool { return w != nil && !w.Stale })
	host, _ := os.Hostname()
	if child.Host != host || child.PID != cmd.Process.Pid || child.Version != mscheduler.Version ||
		!slices.Equal(child.Collections, []string{name}) || child.Capacity != mscheduler.CapacityDefault || child.HeartbeatMS != 200 {
		t.Fatalf("registry entry %+v", child)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	waitWorker(t, "child", "went stale", func(w *mscheduler.WorkerInfo) bool { return w != nil && w.Stale })
	if took := time.Since(killed); took < 400*time.Millisecond {
		t.Fatalf("reported stale %s after the kill, before three heartbeats were missed", took)
	}

	w := newWorker(t, worker.Config{WorkerID: "clean", HeartbeatInterval: 100 * time.Millisecond})
	if err := worker.Register(w, name, add, nil); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	waitWorker(t, "clean", "announced itself", func(w *mscheduler.WorkerInfo) bool { return w != nil })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if findWorker(t, "clean") != nil {
		t.Fatal("a cleanly stopped worker is still listed")
	}
	_ = mscheduler.Deregister(context.Background(), mschedulertest.Client().Database(testDatabase), "child")
}

// scrape reads the metrics endpoint.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestMetricsAndHealth: after known work, the metrics endpoint reports it
// under the documented names; /healthz and /readyz answer.
func TestMetricsAndHealth(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{HTTPAddr: "127.0.0.1:0", WorkerID: "metered"})
	ev := mschedulertest.NewEvents()
	addOrFail := func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) {
		if task.Params.A < 0 {
			return 0, errors.New("negative")
		}
		return add(ctx, task)
	}
	if err := worker.Register(w, name, addOrFail, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	defer func() { _ = stop() }()
	publish(t, name, mscheduler.Task[sum]{Key: "a", Params: sum{A: 1, B: 2}}, mscheduler.Task[sum]{Key: "b", Params: sum{A: 2, B: 2}},
		mscheduler.Task[sum]{Key: "broken", Params: sum{A: -1}, MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1})
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	body := scrape(t, w.HTTPAddr())
	for _, want := range []string{
		`mscheduler_runs_started_total{collection="` + name + `"} 3`,
		`mscheduler_runs_ended_total{collection="` + name + `",outcome="succeeded"} 2`,
		`mscheduler_runs_ended_total{collection="` + name + `",outcome="failed"} 1`,
		`mscheduler_run_duration_seconds_count{collection="` + name + `",outcome="succeeded"} 2`,
		`mscheduler_claim_duration_seconds_count{collection="` + name + `"} 3`,
		`mscheduler_run_end_duration_seconds_count{collection="` + name + `"} 3`,
		`mscheduler_runs_in_progress{worker_id="metered"} 0`,
		`mscheduler_worker_info{version="` + mscheduler.Version + `",worker_id="metered"} 1`,
		`mscheduler_runs_limit{collection="` + name + `"} 10`, // its capacity: the server is fast
		`mscheduler_claims_held_back_total{collection="` + name + `"} 0`,
		`mscheduler_command_retries_total{collection="` + name + `"} 0`,
		`mscheduler_server_latency_seconds{collection="` + name + `"} `,
		`mscheduler_command_duration_seconds_count{command="find"} `,
		`mscheduler_command_duration_seconds_count{command="update"} `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + w.HTTPAddr() + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %v %v", path, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}

// TestDashboardOnTheListener: with Config.Dashboard, the worker's listener
// serves the dashboard under /dashboard/, read-only since it has no token.
func TestDashboardOnTheListener(t *testing.T) {
	t.Setenv(dashboard.EnvToken, "")
	name, addr := dashboardWorker(t, "with-dashboard", "")
	base := "http://" + addr + "/dashboard/"
	for path, want := range map[string]string{"": "Overview", "task?c=" + name + "&key=a": "acting needs a token", "static/live.js": "data-live"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET /dashboard/%s: %d (%v), want %q in:\n%.1500s", path, resp.StatusCode, err, want, body)
		}
	}
	req, err := http.NewRequest(http.MethodPost, base+"task?c="+name+"&key=a", strings.NewReader(url.Values{"action": {"delete"}, "seen": {"succeeded"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+addr) // as its own page sends it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST to the tokenless dashboard answered %d, want 403", resp.StatusCode)
	}
}

// An action on the dashboard of a worker's listener sends the browser on
// to a page under /dashboard/, not to the listener's root, where there is
// none.
func TestDashboardActionStaysUnderItsPrefix(t *testing.T) {
	name, addr := dashboardWorker(t, "acting-dashboard", "t0k")
	base := "http://" + addr + "/dashboard/"
	req, err := http.NewRequest(http.MethodPost, base+"task?c="+name+"&key=a", strings.NewReader(url.Values{"action": {"delete"}, "seen": {"succeeded"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+addr)
	req.Header.Set("Authorization", "Bearer t0k")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/dashboard/tasks?") {
		t.Errorf("delete answered %d to %q; want 303 to /dashboard/tasks?...", resp.StatusCode, loc)
	}
}

// dashboardWorker runs a worker whose listener serves a dashboard with
// token (none: read-only) until the test ends, with one task "a" of a new
// collection succeeded; it returns the collection and the listener's
// address.
func dashboardWorker(t *testing.T, id, token string) (name, addr string) {
	t.Helper()
	name = collectionName(t)
	w := newWorker(t, worker.Config{HTTPAddr: "127.0.0.1:0", WorkerID: id,
		Dashboard: &dashboard.Config{Collections: []string{name}, Token: token}})
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, name, add, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	t.Cleanup(func() { _ = stop() })
	publish(t, name, mscheduler.Task[sum]{Key: "a", Params: sum{A: 1, B: 2}})
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	return name, w.HTTPAddr()
}
