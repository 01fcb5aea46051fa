package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// binary is the command, built once by TestMain: the tests run it as an
// operator would, and check its output and exit status.
var binary string

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mscheduler-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "mscheduler")
	if runtime.GOOS == "windows" {
		binary += ".exe"
	}
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return mschedulertest.Main(m)
}

// commandTimeout bounds one run of the command; every run is expected to
// take well under a second.
const commandTimeout = 30 * time.Second

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runCommand runs the command with args, in an environment without the
// parent's server settings plus env.
func runCommand(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MONGODB_URI=") && !strings.HasPrefix(kv, "MSCHEDULER_DB=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// serverEnv points the command at the test server.
func serverEnv() []string { return []string{"MONGODB_URI=" + mschedulertest.URI()} }

// wantOK fails the test unless the command succeeded without a word on
// stderr.
func (r result) wantOK(t *testing.T) result {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q; want success (stdout %q)", r.code, r.stderr, r.stdout)
	}
	return r
}

// wantError fails the test unless the command exited with code, printing
// nothing on stdout and one line on stderr that names the command and
// contains every one of want.
func (r result) wantError(t *testing.T, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "mscheduler: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr %q, want one line starting with \"mscheduler: \"", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not contain %q", r.stderr, w)
		}
	}
}

// email is the params type of the tasks the tests publish; the command
// knows nothing of it.
type email struct {
	To    string    `bson:"to"`
	Tries int       `bson:"tries"`
	Since time.Time `bson:"since"`
}

// fixture is a collection of its own with three tasks: two plain ones
// and one with a plan.
type fixture struct {
	t        *testing.T
	coll     *mongo.Collection
	producer *mscheduler.Producer[email]
}

var since = time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)

const longDescription = "a second welcome,\twith a tab, and words that go on well past the width of the column"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p, err := mscheduler.NewProducer[email](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := mscheduler.Every(1, mscheduler.Hour)
	tasks := []mscheduler.Task[email]{
		{Key: "welcome-1", Params: email{To: "ada@example.com", Tries: 1, Since: since}, Priority: 3,
			Description: "send the welcome email", Source: "signup-api", Tags: []string{"mail", "welcome"}},
		{Key: "welcome-2", Params: email{To: "bob@example.com"},
			Description: longDescription, Source: "signup-api", Tags: []string{"mail"}},
		{Key: "report-hourly", Plan: &plan, Concurrency: 2,
			Description: "hourly report", Source: "billing", Tags: []string{"report"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if _, err := p.PublishMany(ctx, tasks, nil); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return &fixture{t: t, coll: coll, producer: p}
}

// run runs the command on the fixture's collection.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	return runCommand(f.t, serverEnv(), append([]string{"--db", mschedulertest.Database, "-c", f.coll.Name()}, args...)...)
}

// get reads a task through the library.
func (f *fixture) get(key string) *mscheduler.TaskInfo[email] {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	ti, err := f.producer.Get(ctx, key)
	if err != nil {
		f.t.Fatalf("get %q: %v", key, err)
	}
	return ti
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"no command", serverEnv(), nil, []string{"no command"}},
		{"unknown command", serverEnv(), []string{"-c", "x", "frobnicate"}, []string{`unknown command "frobnicate"; run`}},
		{"a typo of a command", serverEnv(), []string{"-c", "x", "pubilsh", "k"}, []string{`unknown command "pubilsh": did you mean "publish"?`}},
		{"a typo of another", serverEnv(), []string{"-c", "x", "stat"}, []string{`did you mean "stats"?`}},
		{"bad global flag", serverEnv(), []string{"--bogus", "list"}, []string{"-bogus"}},
		{"bad flag", serverEnv(), []string{"-c", "x", "list", "--bogus"}, []string{"list:", "-bogus"}},
		{"bad flag value", serverEnv(), []string{"-c", "x", "update", "k", "--priority", "high"}, []string{"update:", "priority"}},
		{"missing key", serverEnv(), []string{"-c", "x", "show"}, []string{"show: want KEY"}},
		{"extra argument", serverEnv(), []string{"-c", "x", "pause", "a", "b"}, []string{"pause: want KEY, got 2"}},
		{"flags after --", serverEnv(), []string{"-c", "x", "pause", "--", "-a", "--json"}, []string{"pause: want KEY, got 2"}},
		{"skip without count", serverEnv(), []string{"-c", "x", "skip", "a"}, []string{"skip: want KEY N"}},
		{"skip count not a number", serverEnv(), []string{"-c", "x", "skip", "a", "two"}, []string{`"two"`}},
		{"nothing to update", serverEnv(), []string{"-c", "x", "update", "a"}, []string{"update: nothing to change"}},
		{"unknown status", serverEnv(), []string{"-c", "x", "list", "--status", "runing"}, []string{`"runing"`, "pending"}},
		{"limit below 1", serverEnv(), []string{"-c", "x", "list", "--limit", "0"}, []string{"--limit"}},
		{"no collection", serverEnv(), []string{"list"}, []string{"--collection"}},
		{"no URI", nil, []string{"-c", "x", "list"}, []string{"MONGODB_URI"}},
		{"URI not mongodb", nil, []string{"--uri", "http://localhost", "-c", "x", "list"}, []string{"--uri"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runCommand(t, tc.env, tc.args...).wantError(t, exitUsage, tc.want...)
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}} {
		r := runCommand(t, nil, args...).wantOK(t)
		for _, cmd := range []string{"list", "show", "update", "pause", "resume", "skip", "--collection"} {
			if !strings.Contains(r.stdout, cmd) {
				t.Errorf("%v: usage does not mention %s:\n%s", args, cmd, r.stdout)
			}
		}
	}
	r := runCommand(t, nil, "update", "-h").wantOK(t)
	for _, flag := range []string{"-concurrency", "-worker-ids", "-tags", "-max-failed-runs"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("update -h does not list %s:\n%s", flag, r.stdout)
		}
	}
	// "help COMMAND" is "COMMAND -h"; every flag a command takes is in its
	// synopsis, which the general help lists.
	if a, b := runCommand(t, nil, "help", "publish").wantOK(t), runCommand(t, nil, "publish", "-h").wantOK(t); a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "Usage: mscheduler publish KEY") {
		t.Errorf("help publish printed:\n%s\nwant what publish -h prints:\n%s", a.stdout, b.stdout)
	}
	for _, cmd := range commands {
		fs := newFlagSet(cmd.name)
		c := &cli{stdout: io.Discard, stderr: io.Discard}
		_ = cmd.run(context.Background(), c, fs, []string{"-h"})
		fs.VisitAll(func(f *flag.Flag) {
			if !isGlobal(f.Name) && f.Name != "h" && !strings.Contains(cmd.synopsis, "--"+f.Name) && cmd.name != "publish" && cmd.name != "update" {
				t.Errorf("%s: --%s is not in its synopsis %q", cmd.name, f.Name, cmd.synopsis)
			}
		})
	}
}

// A server that cannot be reached is a one-line error within the connect
// timeout, not the driver's 30 s wait.
func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	r := runCommand(t, []string{"MONGODB_URI=mongodb://127.0.0.1:1"}, "--connect-timeout", "500ms", "-c", "x", "list")
	r.wantError(t, exitError, "no server answered at 127.0.0.1:1 within --connect-timeout (500ms)", "connection refused")
	if strings.Contains(r.stderr, "topology") {
		t.Errorf("stderr %q carries the driver's topology dump", r.stderr)
	}
	if v := runCommand(t, []string{"MONGODB_URI=mongodb://127.0.0.1:1"}, "-v", "--connect-timeout", "500ms", "-c", "x", "list"); !strings.Contains(v.stderr, "topology") {
		t.Errorf("with -v, stderr %q lacks the driver's own error", v.stderr)
	}
	if r.took > 10*time.Second {
		t.Errorf("took %s to give up, want about the 500ms connect timeout", r.took)
	}
}

// --uri wins over MONGODB_URI, and the global flags may follow the
// command.
func TestURIFlagOverridesEnvironment(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := runCommand(t, []string{"MONGODB_URI=mongodb://127.0.0.1:1"},
		"show", "welcome-1", "--uri", mschedulertest.URI(), "--db", mschedulertest.Database, "-c", f.coll.Name())
	r.wantOK(t)
	if !strings.Contains(r.stdout, "send the welcome email") {
		t.Errorf("show did not print the task:\n%s", r.stdout)
	}
}
