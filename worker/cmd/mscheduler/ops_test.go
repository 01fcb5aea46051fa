package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestPublish: publish stores what its flags say, with a plan in the short
// syntax; bad input is refused naming the flag or the field, and writes
// nothing.
func TestPublish(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run("publish", "mail-7", "--params", `{"to":"eve@example.com","tries":2}`, "--in", "1h", "--priority", "4",
		"--concurrency", "2", "--worker-ids", "a,b", "--max-retries", "-1", "--timeout", "90s", "--tags", "mail,vip", "--description", "a mail")
	if r.wantOK(t).stdout != "inserted mail-7\n" {
		t.Errorf("publish printed %q", r.stdout)
	}
	ti := f.get("mail-7")
	if ti.Task.Params.To != "eve@example.com" || ti.Task.Params.Tries != 2 || ti.Task.Priority != 4 || ti.Task.Concurrency != 2 ||
		strings.Join(ti.Task.WorkerIDs, ",") != "a,b" || ti.Task.MaxRetries != mscheduler.NoRetries || ti.Task.Timeout != 90*time.Second ||
		time.Until(ti.Task.RunAt) < 50*time.Minute || ti.Task.Source != "mscheduler command" {
		t.Errorf("published task %+v", ti.Task)
	}
	f.run("publish", "weekly", "--plan", "weekly sun 10:00", "--zone", "Europe/Berlin", "--repeat", "4").wantOK(t)
	if p := f.get("weekly").Task.Plan; p == nil || p.Kind != mscheduler.PlanWeekly || p.Weekday != time.Sunday || p.Time.Hour != 10 || p.Zone != "Europe/Berlin" || p.Repeat != 4 {
		t.Errorf("published plan %+v", p)
	}
	f.run("publish", "cron", "--plan", `cron "*/10 * * * *"`).wantOK(t)
	if r := f.run("publish", "mail-7").wantOK(t); !strings.Contains(r.stdout, "left unchanged") {
		t.Errorf("publish of an existing key printed %q", r.stdout)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"publish", "x", "--params", "{not json"}, exitUsage, "--params must be one JSON value"},
		{[]string{"publish", "x", "--params", `1, "w": 2`}, exitUsage, "--params must be one JSON value"},
		{[]string{"publish", "x", "--plan", "hourly"}, exitUsage, "--plan must start with"},
		{[]string{"publish", "x", "--plan", "every 5m", "--missed", "never"}, exitUsage, `publish "x": --missed: `},
		{[]string{"publish", "x", "--plan", "every 5m", "--zone", "Mars/Base"}, exitUsage, `publish "x": --zone: unknown time zone`},
		{[]string{"publish", "x", "--plan", "cron 'x y'"}, exitUsage, `publish "x": --plan: must have 5 or 6 fields`},
		{[]string{"publish", "x", "--max-retries", "-4"}, exitUsage, `--max-retries: must be -1 (no retries) or more`},
		{[]string{"publish", "x", "--in", "-5m"}, exitUsage, "--in must not be negative"},
		{[]string{"publish", "x", "--zone", "UTC"}, exitUsage, "need --plan"},
		{[]string{"publish", "x", "--plan", "every 5m", "--in", "1h"}, exitUsage, "--run-at and --in do not go with --plan"},
		{[]string{"publish", "x", "--ping-interval", "5"}, exitUsage, "with a unit"},
		{[]string{"publish", "x", "--concurrency", "-2"}, exitUsage, `publish "x": --concurrency: must be at least 1`},
		{[]string{"publish", "x", "--run-at", "tomorrow"}, exitUsage, "RFC 3339"},
		{[]string{"publish"}, exitUsage, "publish: want KEY"},
	} {
		f.run(tc.args...).wantError(t, tc.code, tc.want)
	}
	if _, err := f.producer.Get(context.Background(), "x"); err == nil {
		t.Error("a refused publish wrote its task")
	}
}

// TestCancelRetryRunNowDelete: each action works, says what it did, and
// refuses (exit 1, one line saying why) what does not apply.
func TestCancelRetryRunNowDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.run("publish", "later", "--in", "1h").wantOK(t)
	if r := f.run("run-now", "later").wantOK(t); r.stdout != "due now: later\n" {
		t.Errorf("run-now printed %q", r.stdout)
	}
	// The server's clock as the command estimated it: near now, on either side.
	if ti := f.get("later"); time.Since(ti.Task.RunAt).Abs() > time.Minute {
		t.Errorf("run_at %s, want now (%s)", ti.Task.RunAt, time.Now())
	}
	if r := f.run("cancel", "later").wantOK(t); r.stdout != "cancelled later\n" {
		t.Errorf("cancel printed %q", r.stdout)
	}
	f.run("cancel", "later").wantError(t, exitError, `cancel "later": the task is already cancelled`)
	f.run("run-now", "later").wantError(t, exitError, "only a pending task")
	f.run("retry", "welcome-1").wantError(t, exitError, `retry "welcome-1": only a failed, cancelled or invalid task`)
	if r := f.run("retry", "later").wantOK(t); r.stdout != "retrying later\n" || f.get("later").Status != mscheduler.StatusPending {
		t.Errorf("retry printed %q, task %s", r.stdout, f.get("later").Status)
	}
	f.run("resume", "later").wantError(t, exitError, `resume "later": the task is not paused`)
	if r := f.run("delete", "later").wantOK(t); r.stdout != "deleted later\n" {
		t.Errorf("delete printed %q", r.stdout)
	}
	f.run("delete", "later").wantError(t, exitError, `delete "later": task not found`)

	// A task with a run going: refused without --force.
	ev := mschedulertest.NewEvents()
	f.run("publish", "busy", "--worker-ids", "holder", "--ping-interval", "200ms").wantOK(t)
	f.startConsumer(t, "holder", ev, func(ctx context.Context, task *mscheduler.Task[email]) (int, error) {
		if task.Key != "busy" {
			return 0, nil
		}
		<-ctx.Done()
		return 0, context.Cause(ctx)
	})
	ev.WaitFor(t, "busy to be claimed", func(evs []mscheduler.Event) bool {
		for _, e := range evs {
			if e.Kind == mscheduler.EventClaimed && e.Key == "busy" {
				return true
			}
		}
		return false
	})
	f.run("delete", "busy").wantError(t, exitError, "1 run going", "with force")
	f.run("delete", "busy", "--force").wantOK(t)
	ev.WaitCount(t, mscheduler.EventCancelled, 1)
	if _, err := f.producer.Get(context.Background(), "busy"); err == nil {
		t.Error("busy is still there")
	}
}

// TestHistoryStatsWorkersWait: after runs, history lists them newest first
// and pages; stats counts; wait returns the final status and exits 1 when
// the task did not succeed; workers lists the registry.
func TestHistoryStatsWorkersWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, k := range []string{"welcome-1", "welcome-2", "report-hourly"} {
		f.run("pause", k).wantOK(t) // left waiting, for wait --timeout and stats
	}
	f.run("publish", "fails", "--max-retries", "-1", "--max-failed-runs", "1", "--worker-ids", "w").wantOK(t)
	f.run("publish", "works", "--worker-ids", "w").wantOK(t)
	ev := mschedulertest.NewEvents()
	f.startConsumer(t, "w", ev, func(_ context.Context, task *mscheduler.Task[email]) (int, error) {
		if task.Key == "fails" {
			return 0, errorString("mail server down")
		}
		return 3, nil
	})
	if r := f.run("wait", "works").wantOK(t); r.stdout != "works succeeded: 3\n" {
		t.Errorf("wait printed %q", r.stdout)
	}
	r := f.run("wait", "fails")
	if r.code != exitError || r.stdout != "fails failed: mail server down\n" {
		t.Errorf("wait of a failing task: exit %d, stdout %q", r.code, r.stdout)
	}
	f.run("wait", "welcome-1", "--timeout", "200ms").wantError(t, exitError, "still not done after 200ms")

	waitUntil(t, "the history records", func() bool {
		n, _ := f.coll.Database().Collection(f.coll.Name()+".runs").CountDocuments(context.Background(), bson.D{})
		return n == 2
	})
	out := f.run("history").wantOK(t).stdout
	if !strings.Contains(out, "fails") || !strings.Contains(out, "mail server down") || !strings.Contains(out, "2 runs, newest first") {
		t.Errorf("history:\n%s", out)
	}
	page := f.run("history", "--limit", "1").wantOK(t).stdout
	cursor := page[strings.Index(page, "--after ")+len("--after "):]
	cursor = strings.TrimSpace(cursor)
	if cursor == "" || !strings.Contains(f.run("history", "--limit", "1", "--after", cursor).wantOK(t).stdout, "1 run, newest first\n") {
		t.Errorf("paging: %q then cursor %q", page, cursor)
	}
	if one := f.run("history", "works", "--json").wantOK(t).stdout; !strings.Contains(one, `"outcome": "succeeded"`) || strings.Contains(one, "fails") {
		t.Errorf("history works --json:\n%s", one)
	}

	stats := f.run("stats").wantOK(t).stdout
	wantLines(t, stats, map[string]string{"succeeded": "1", "failed": "1", "pending": "3"})
	if !regexp.MustCompile(`queue depth: +\d+ due now`).MatchString(stats) || !strings.Contains(stats, "last hour:") || !strings.Contains(stats, "2 runs ended, 1 failed or expired") {
		t.Errorf("stats:\n%s", stats)
	}

	db := mschedulertest.Client().Database(mschedulertest.Database)
	id := "cmd-test-" + f.coll.Name()
	if err := mscheduler.Heartbeat(context.Background(), db, mscheduler.WorkerInfo{ID: id, Host: "h", PID: 42, HeartbeatMS: 10_000}); err != nil {
		t.Fatal(err)
	}
	// An executor of the gateway: no process, no capacity of its own.
	executor := "cmd-test-executor-" + f.coll.Name()
	if err := mscheduler.Heartbeat(context.Background(), db, mscheduler.WorkerInfo{ID: executor, Host: "h", Running: 5, HeartbeatMS: 10_000}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mscheduler.Deregister(context.Background(), db, id)
		_ = mscheduler.Deregister(context.Background(), db, executor)
	})
	ws := f.run("workers").wantOK(t).stdout
	if !strings.Contains(ws, id) || !strings.Contains(ws, "live") {
		t.Errorf("workers:\n%s", ws)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(executor) + `\s+live\s+h\s+-\s+\S*\s*5\s`).MatchString(ws) {
		t.Errorf("workers shows the executor otherwise than with no PID (-) and 5 runs:\n%s", ws)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(f.run("workers", "--json").wantOK(t).stdout), &list); err != nil || len(list) == 0 {
		t.Errorf("workers --json: %v", err)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// waitUntil polls cond, for a state no event announces.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRoughEdges: the command line's corner cases say what is wrong.
func TestRoughEdges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.run("list", "extra").wantError(t, exitUsage, "list takes no arguments, got 1 (extra)")
	f.run("skip", "report-hourly", "-1").wantError(t, exitUsage, `skip "report-hourly": N: must be from 0`)
	f.run("update", "welcome-1", "--timeout", "5").wantError(t, exitUsage, "with a unit, like 500ms, 5s or 2m")
	f.run("update", "welcome-1", "--priority", "-5").wantOK(t)
	if p := f.get("welcome-1").Task.Priority; p != -5 {
		t.Errorf("priority %d after --priority -5", p)
	}
	misspelt := f.coll.Name() + "-typo"
	for _, args := range [][]string{{"list"}, {"publish", "typo-1"}, {"show", "welcome-1"}, {"cancel", "welcome-1"}, {"wait", "welcome-1"}} {
		runCommand(t, serverEnv(), append([]string{"--db", mschedulertest.Database, "-c", misspelt}, args...)...).wantError(t, exitError, "does not exist", "publish --create")
	}
	if names, err := mschedulertest.Client().Database(mschedulertest.Database).ListCollectionNames(context.Background(),
		bson.D{{Key: "name", Value: bson.D{{Key: "$in", Value: []string{misspelt, misspelt + ".meta"}}}}}); err != nil || len(names) > 0 {
		t.Errorf("commands on a misspelt collection created %q (%v)", names, err)
	}
	fresh := f.coll.Name() + "-fresh"
	t.Cleanup(func() {
		for _, name := range []string{fresh, fresh + ".meta", fresh + ".runs"} {
			_ = mschedulertest.Client().Database(mschedulertest.Database).Collection(name).Drop(context.Background())
		}
	})
	runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", fresh, "publish", "--create", "first").wantOK(t)
	for _, bad := range []string{`say"hi`, "a$b", "system.x", fresh + ".meta"} {
		runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", bad, "migrate", "--create").wantError(t, exitUsage, "collection")
		runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", bad, "publish", "--create", "x").wantError(t, exitUsage, "collection")
	}
	runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", fresh, "show", "first").wantOK(t)
	f.run("history", "--outcome", "weird").wantError(t, exitUsage, `unknown --outcome "weird": want one of succeeded`)
	f.run("history", "--after", "zzz").wantError(t, exitUsage, "history: --after: is not a cursor this command printed")
	typo := f.coll.Name() + "-new"
	runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", typo, "migrate").wantError(t, exitError, "does not exist")
	r := runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", typo, "migrate", "--create").wantOK(t)
	if !strings.Contains(r.stdout, "new collection") {
		t.Errorf("migrate --create printed %q", r.stdout)
	}
	t.Cleanup(func() {
		_ = mschedulertest.Client().Database(mschedulertest.Database).Collection(typo).Drop(context.Background())
		_ = mschedulertest.Client().Database(mschedulertest.Database).Collection(typo + ".meta").Drop(context.Background())
		_ = mschedulertest.Client().Database(mschedulertest.Database).Collection(typo + ".runs").Drop(context.Background())
	})
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if v := runCommand(t, nil, args...).wantOK(t).stdout; v != "mscheduler "+mscheduler.Version+"\n" {
			t.Errorf("%v printed %q", args, v)
		}
	}
	f.run("pause", "welcome-2").wantOK(t)
	_, rows, _ := table(t, f.run("list", "--status", "paused").wantOK(t).stdout)
	if len(rows) != 1 || rows[0][0] != "welcome-2" {
		t.Errorf("list --status paused: %v", rows)
	}
	_, rows, summary := table(t, f.run("list", "--limit", "1").wantOK(t).stdout)
	next := strings.TrimPrefix(summary[strings.Index(summary, "--after "):], "--after ")
	_, rest, _ := table(t, f.run("list", "--after", next).wantOK(t).stdout)
	if len(rows) != 1 || len(rest) != 2 || rest[0][0] == rows[0][0] {
		t.Errorf("paging by --after %q: %v then %v", next, rows, rest)
	}
}

// startServing starts a command that serves until Ctrl-C and returns it
// with the first line it prints, which must start with prefix (its
// address); the command is killed at the end of the test.
func startServing(t *testing.T, cmd *exec.Cmd, prefix string) (*exec.Cmd, string) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(addr, prefix) {
		t.Fatalf("%v printed %q (%v), want an address starting %s", cmd.Args[1:], line, err, prefix)
	}
	return cmd, addr
}

// TestDev: "mscheduler dev" starts the development server, prints its URI
// on stdout, serves clients, and stops on Ctrl-C.
func TestDev(t *testing.T) {
	t.Parallel()
	cmd, uri := startServing(t, exec.Command(binary, "dev", "--addr", "127.0.0.1:0"), "mongodb://127.0.0.1:")
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if err := client.Ping(ctx, nil); err != nil {
		t.Fatalf("ping the dev server: %v", err)
	}
	_ = client.Disconnect(ctx)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dev after Ctrl-C: %v", err)
	}
}
