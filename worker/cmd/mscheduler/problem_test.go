package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// edit changes a task by hand, as a person would in mongosh.
func (f *fixture) edit(key string, update bson.D) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if res, err := f.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: key}}, update); err != nil || res.MatchedCount != 1 {
		f.t.Fatalf("edit %q: %v", key, err)
	}
}

// TestListAndShowBadDocuments: a document edited by hand into the wrong
// shape does not stop list; list and show name its problem instead of a
// next run.
func TestListAndShowBadDocuments(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.edit("welcome-2", bson.D{{Key: "$set", Value: bson.D{{Key: "run_at", Value: "tomorrow"}}}})
	out := f.run("list").wantOK(t).stdout
	if !strings.Contains(out, "3 tasks") || !strings.Contains(out, "problem: welcome-2: field run_at must be a date") {
		t.Errorf("list does not show the bad task and its problem:\n%s", out)
	}
	show := f.run("show", "welcome-2").wantOK(t).stdout
	wantLines(t, show, map[string]string{
		"problem":  `field run_at must be a date, got string "tomorrow"`,
		"next run": "never, until repaired",
	})
	var got map[string]any
	if err := json.Unmarshal([]byte(f.run("show", "--json", "welcome-2").wantOK(t).stdout), &got); err != nil || !strings.Contains(got["problem"].(string), "run_at") {
		t.Errorf("show --json: problem %v (%v)", got["problem"], err)
	}
}

// TestShowRunsLastErrorAndCutsLongValues: show prints the last error and
// the most recent runs, and cuts long params and results unless --full.
func TestShowRunsLastErrorAndCutsLongValues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	long := strings.Repeat("x", 5000)
	task := mscheduler.Task[email]{Key: "big", Params: email{To: long}, MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 3}
	if _, err := f.producer.Publish(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	f.startConsumer(t, "w", ev, func(_ context.Context, task *mscheduler.Task[email]) (int, error) {
		if task.Key == "big" && task.Run.FailedRuns == 0 {
			return 0, errors.New("smtp: connection refused")
		}
		return 7, nil
	})
	ev.WaitFor(t, "big to succeed after a failure", func([]mscheduler.Event) bool { return f.get("big").Status == mscheduler.StatusSucceeded })
	out := f.run("show", "big").wantOK(t).stdout
	if !strings.Contains(out, "last error:") || !strings.Contains(out, "smtp: connection refused") {
		t.Errorf("show does not print the last error:\n%s", out)
	}
	if !strings.Contains(out, "2 most recent of 2 kept") || !strings.Contains(out, "failed") || !strings.Contains(out, "succeeded") {
		t.Errorf("show does not list the runs:\n%s", out)
	}
	if strings.Contains(out, long) || !strings.Contains(out, "--full prints it whole") {
		t.Errorf("show printed the 5 KB params whole, or did not say it cut them")
	}
	if full := f.run("show", "--full", "big").wantOK(t).stdout; !strings.Contains(full, long) {
		t.Errorf("show --full did not print the params whole")
	}
}

// TestShowInvalidTask: a task a worker set invalid shows why, when and by
// whom, and list --status invalid finds it.
func TestShowInvalidTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.edit("welcome-1", bson.D{{Key: "$set", Value: bson.D{{Key: "max_failed_runs", Value: "3"}}}})
	ev := mschedulertest.NewEvents()
	f.startConsumer(t, "w", ev, func(context.Context, *mscheduler.Task[email]) (int, error) { return 0, nil })
	ev.WaitCount(t, mscheduler.EventInvalid, 1)
	out := f.run("show", "welcome-1").wantOK(t).stdout
	wantLines(t, out, map[string]string{
		"status":  "invalid",
		"problem": `field max_failed_runs must be a whole number, got string "3"`,
	})
	if !strings.Contains(out, "set invalid:") || !strings.Contains(out, "by w, at claim (was running)") {
		t.Errorf("show does not say who set it invalid and when:\n%s", out)
	}
	list := f.run("list", "--status", "invalid").wantOK(t).stdout
	if !strings.Contains(list, "welcome-1") || !strings.Contains(list, "1 task") {
		t.Errorf("list --status invalid:\n%s", list)
	}
}
