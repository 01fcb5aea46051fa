package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// splitProblems splits the output of history or workers into the table
// with its summary line, and the problem lines under it.
func splitProblems(t *testing.T, stdout string) (tableOut string, problems []string) {
	t.Helper()
	i := strings.Index(stdout, "\nproblem: ")
	if i < 0 {
		return stdout, nil
	}
	return stdout[:i+1], strings.Split(strings.TrimSuffix(stdout[i+1:], "\n"), "\n")
}

// TestHistoryAndWorkersShowBadRecords: a run record or a worker document
// edited by hand into the wrong shape does not stop history or workers:
// it is listed with what could be read, and its problem is under the
// table, as list does for tasks; --json carries it too, and paging with
// --after goes past it.
func TestHistoryAndWorkersShowBadRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Second)
	record := func(id string, finished any) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "key", Value: "welcome-1"}, {Key: "run_id", Value: id}, {Key: "worker_id", Value: "w"},
			{Key: "started", Value: now.Add(-time.Minute)}, {Key: "finished", Value: finished}, {Key: "outcome", Value: "succeeded"}, {Key: "attempts", Value: 1}}
	}
	bad := record("run-bad-outcome", now.Add(-time.Second))
	bad[6].Value = 5 // outcome
	history := f.coll.Database().Collection(f.coll.Name() + ".runs")
	if _, err := history.InsertMany(ctx, []any{record("run-good", now), bad, record("run-yesterday", "yesterday")}); err != nil {
		t.Fatal(err)
	}

	out := f.run("history").wantOK(t).stdout
	tableOut, problems := splitProblems(t, out)
	_, rows, summary := table(t, tableOut)
	if summary != "3 runs, newest first" || len(rows) != 3 {
		t.Fatalf("history lists %d rows (%q), want the 3 records:\n%s", len(rows), summary, out)
	}
	if got := []string{rows[0][6], rows[1][6], rows[2][6]}; !slices.Equal(got, []string{"run-good", "run-bad-outcome", "run-yesterday"}) {
		t.Errorf("history lists runs %v, want run-good, run-bad-outcome, run-yesterday:\n%s", got, out)
	}
	if rows[0][2] != "succeeded" || rows[0][5] != "1m0s" || rows[1][2] != "-" || rows[1][3] != "w" || rows[2][0] != "-" || rows[2][5] != "-" {
		t.Errorf("history rows %v, want the good run whole and what could be read of the bad ones:\n%s", rows, out)
	}
	wantProblems := []string{
		`problem: run-bad-outcome: field outcome must be a string, got 32-bit integer {"$numberInt":"5"}`,
		`problem: run-yesterday: field finished must be a date, got string "yesterday"`,
	}
	if !slices.Equal(problems, wantProblems) {
		t.Errorf("history problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(wantProblems, "\n"))
	}
	var js struct {
		Runs []struct {
			RunID   string `json:"run_id"`
			Outcome string `json:"outcome"`
			Problem string `json:"problem"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(f.run("history", "--json").wantOK(t).stdout), &js); err != nil || len(js.Runs) != 3 {
		t.Fatalf("history --json: %v, %d runs", err, len(js.Runs))
	}
	if js.Runs[0].Problem != "" || js.Runs[0].Outcome != "succeeded" || !strings.HasPrefix(js.Runs[1].Problem, "field outcome must be a string") ||
		!strings.HasPrefix(js.Runs[2].Problem, "field finished must be a date") {
		t.Errorf("history --json: %+v", js.Runs)
	}
	// One run a page: each page's cursor reads on, past the bad records.
	var paged []string
	args := []string{"history", "--limit", "1"}
	for range 5 {
		page := f.run(args...).wantOK(t).stdout
		tableOut, _ := splitProblems(t, page)
		_, rows, summary := table(t, tableOut)
		for _, r := range rows {
			paged = append(paged, r[6])
		}
		_, cursor, more := strings.Cut(summary, "; more with --after ")
		if !more {
			break
		}
		args = []string{"history", "--limit", "1", "--after", cursor}
	}
	if !slices.Equal(paged, []string{"run-good", "run-bad-outcome", "run-yesterday"}) {
		t.Errorf("paging one run at a time visits %v, want each run once", paged)
	}

	// The worker registry, in a database of the test's own.
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := mschedulertest.Client().Database("mscheduler_cmd_" + hex.EncodeToString(b[:]))
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	for _, id := range []string{"node-a", "node-b"} {
		w := mscheduler.WorkerInfo{ID: id, Host: "box", PID: 42, Version: mscheduler.Version, Collections: []string{"emails"}, Capacity: 4, HeartbeatMS: 10_000}
		if err := mscheduler.Heartbeat(ctx, db, w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Collection(mscheduler.WorkersCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "node-b"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "pid", Value: "abc"}}}}); err != nil {
		t.Fatal(err)
	}
	out = runCommand(t, serverEnv(), "--db", db.Name(), "workers").wantOK(t).stdout
	tableOut, problems = splitProblems(t, out)
	_, rows, summary = table(t, tableOut)
	if len(rows) != 2 || rows[0][0] != "node-a" || rows[0][3] != "42" || rows[1][0] != "node-b" || rows[1][3] != "-" || rows[1][2] != "box" ||
		!strings.HasPrefix(summary, "2 workers: 2 live") {
		t.Errorf("workers lists %v (%q), want both, node-b without its pid:\n%s", rows, summary, out)
	}
	if want := []string{`problem: node-b: field pid must be a whole number, got string "abc"`}; !slices.Equal(problems, want) {
		t.Errorf("workers problems %q, want %q", problems, want)
	}
	var ws []struct {
		ID      string `json:"id"`
		Problem string
	}
	if err := json.Unmarshal([]byte(runCommand(t, serverEnv(), "--db", db.Name(), "workers", "--json").wantOK(t).stdout), &ws); err != nil ||
		len(ws) != 2 || ws[0].Problem != "" || !strings.HasPrefix(ws[1].Problem, "field pid must be a whole number") {
		t.Errorf("workers --json: %+v (%v)", ws, err)
	}
}
