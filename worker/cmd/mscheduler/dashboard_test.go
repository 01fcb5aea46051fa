package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
)

// TestDashboardDemo: with no server set, "mscheduler dashboard" starts the
// development server, publishes the demo tasks and runs the demo worker,
// so the first page a new user opens is populated and moving.
func TestDashboardDemo(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "dashboard", "--addr", "127.0.0.1:0")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, worker.EnvURI+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr := &mschedulertest.Buffer{}
	cmd.Stderr = stderr
	cmd, base := startServing(t, cmd, "http://127.0.0.1:")
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return string(body)
	}
	// The demo worker runs in the command's process: there is no event to
	// wait on from here, so look until the pages show its work.
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for {
		overview, workers := get(""), get("workers")
		if strings.Contains(overview, "tasks?c=emails&amp;status=succeeded") && strings.Contains(overview, "tasks?c=reports") &&
			strings.Contains(workers, "demo-worker") && strings.Contains(workers, "bar o-succeeded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not show its work; overview:\n%.3000s\nworkers:\n%.3000s", overview, workers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The demo's server, for the command and mongosh.
	if !strings.Contains(stderr.String(), "development server at mongodb://127.0.0.1:") || !strings.Contains(stderr.String(), worker.EnvURI+"=mongodb://") {
		t.Errorf("the demo did not say where its server is; stderr:\n%s", stderr.String())
	}
	if page := get("task?c=reports&key=long-export"); !strings.Contains(page, "a long export") {
		t.Errorf("the long export's page:\n%.3000s", page)
	}
	// As a service manager stops it (Ctrl-C takes the same path).
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dashboard after SIGTERM: %v", err)
		}
	case <-time.After(mschedulertest.WaitTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("dashboard still running %s after SIGTERM", mschedulertest.WaitTimeout)
	}
}
