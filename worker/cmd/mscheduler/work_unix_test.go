//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// workScript answers by task key, to show each way a command's run ends.
const workScript = `case "$MSCHEDULER_KEY" in
json) cat ;;
text) echo "hello $MSCHEDULER_PARAM_name, attempt $MSCHEDULER_ATTEMPT of $MSCHEDULER_COLLECTION" ;;
bad) echo "first line" >&2; echo "no recipient" >&2; exit 3 ;;
trailing) echo '1, "w": 2' ;;
secret) echo "uri=${MONGODB_URI:-none}" ;;
slow) sleep 60 & echo "$!" > "$PID_FILE"; wait ;;
esac`

// TestWork: the work command serves the collection, each run executing
// the shell command: params in on stdin, the result out on stdout (as JSON
// when it is JSON), a failure with the end of stderr, a cancel that stops
// the command, and Ctrl-C that stops the worker.
func TestWork(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	p, err := mscheduler.NewProducer[bson.M](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	tasks := []mscheduler.Task[bson.M]{
		{Key: "json", Params: bson.M{"a": int32(1), "b": bson.A{true, "x"}}},
		{Key: "text", Params: bson.M{"name": "ada", "not-a-name": "skipped"}},
		{Key: "bad", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
		{Key: "trailing"},
		{Key: "secret"},
		{Key: "slow"},
	}
	if _, err := p.PublishMany(ctx, tasks, nil); err != nil {
		t.Fatal(err)
	}
	pidFile := t.TempDir() + "/slow.pid"
	cmd := exec.Command(binary, "--db", mschedulertest.Database, "-c", coll.Name(), "work", "--exec", workScript, "--worker-id", "shell-1", "--quiet")
	cmd.Env = append(os.Environ(), "MONGODB_URI="+mschedulertest.URI(), "PID_FILE="+pidFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	json := waitRun(ctx, t, p, "json")
	if got := bson.Raw(json.Result.Value).String(); json.Outcome != mscheduler.OutcomeSucceeded || json.Result.Type != bson.TypeEmbeddedDocument ||
		!strings.Contains(got, `"a": {"$numberInt":"1"}`) || !strings.Contains(got, `"b": [true,"x"]`) {
		t.Errorf("json: %s with result %s (%s); want the params back as a document", json.Outcome, json.Result, json.Result.Type)
	}
	text := waitRun(ctx, t, p, "text")
	if s, ok := text.Result.StringValueOK(); !ok || s != "hello ada, attempt 1 of "+coll.Name() {
		t.Errorf("text: result %s; want the string the command printed", text.Result)
	}
	bad := waitRun(ctx, t, p, "bad")
	if bad.Outcome != mscheduler.OutcomeFailed || bad.Error != "exit status 3: first line\nno recipient" {
		t.Errorf("bad: %s with error %q; want failed with the exit status and stderr", bad.Outcome, bad.Error)
	}

	if s, ok := waitRun(ctx, t, p, "trailing").Result.StringValueOK(); !ok || s != `1, "w": 2` {
		t.Errorf("trailing: JSON followed by more is stored as %v; want the text as printed", s)
	}
	if s, _ := waitRun(ctx, t, p, "secret").Result.StringValueOK(); s != "uri=none" {
		t.Errorf("the command saw the worker's MONGODB_URI: %q", s)
	}

	pid := waitPID(ctx, t, pidFile)
	if err := p.Cancel(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	if slow := waitRun(ctx, t, p, "slow"); slow.Outcome != mscheduler.OutcomeCancelled {
		t.Errorf("slow: %s; want cancelled", slow.Outcome)
	}
	if alive(pid) {
		t.Errorf("the child of the cancelled run's command (pid %d) is still running", pid)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil {
			t.Errorf("work exited with %v after Ctrl-C; want 0 (stderr %q)", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("work did not stop after Ctrl-C")
	}
	if !strings.Contains(stderr.String(), "serving "+mschedulertest.Database+"."+coll.Name()+" as worker shell-1") ||
		!strings.Contains(stderr.String(), "stopping: runs going may end within 30s") {
		t.Errorf("stderr %q does not say what it serves", stderr.String())
	}
}

// waitRun waits until the task key ends and returns its last run.
func waitRun(ctx context.Context, t *testing.T, p *mscheduler.Producer[bson.M], key string) mscheduler.RunInfo {
	t.Helper()
	info, err := p.Wait(ctx, key)
	if err != nil {
		t.Fatalf("wait %s: %v", key, err)
	}
	last, ok := info.LastRun()
	if !ok {
		t.Fatalf("%s ended %s with no run", key, info.Status)
	}
	return last
}

// alive says the process pid runs: it exists and is no zombie. A zombie
// is an orphan killed that waits for its reaper; where /proc cannot tell,
// the reaper is given a moment.
func alive(pid int) bool {
	for range 50 {
		if syscall.Kill(pid, 0) != nil {
			return false
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			return !bytes.Contains(stat, []byte(") Z "))
		}
		time.Sleep(100 * time.Millisecond) // no event says a reaper ran
	}
	return true
}

// waitPID waits for the slow command to write the pid of its child.
func waitPID(ctx context.Context, t *testing.T, file string) int {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(file); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil {
				return pid
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the slow command never started")
		case <-tick.C:
		}
	}
}
