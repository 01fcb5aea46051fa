package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestUpdate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before := f.get("welcome-1")
	r := f.run("update", "welcome-1", "--description", "say hello", "--tags", "mail, vip", "--concurrency", "3",
		"--priority", "0", "--timeout", "2m", "--worker-ids", "node-a,node-b")
	if r.wantOK(t).stdout != "updated welcome-1\n" {
		t.Errorf("stdout %q, want \"updated welcome-1\"", r.stdout)
	}
	after := f.get("welcome-1")
	got, want := after.Task, before.Task
	want.Description, want.Tags, want.Concurrency = "say hello", []string{"mail", "vip"}, 3
	want.Priority, want.Timeout, want.WorkerIDs = 0, 2*time.Minute, []string{"node-a", "node-b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after update:\n%+v\nwant\n%+v", got, want)
	}
	if after.Free != 3 {
		t.Errorf("free %d, want 3: raising concurrency frees slots", after.Free)
	}

	// An empty list clears; flags not given leave their fields alone.
	f.run("update", "--tags", "", "--worker-ids", "", "welcome-1").wantOK(t)
	cleared := f.get("welcome-1").Task
	if len(cleared.Tags) != 0 || len(cleared.WorkerIDs) != 0 || cleared.Description != "say hello" || cleared.Source != "signup-api" {
		t.Errorf("after clearing tags and worker ids: %+v", cleared)
	}
}

// An invalid value is refused by the library, as a usage error naming the
// flag that gave it, and the document is left as it was.
func TestUpdateInvalid(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before := mschedulertest.Doc(t, f.coll, "welcome-1")
	cases := []struct {
		args  []string
		field string
	}{
		{[]string{"--concurrency", "0"}, "--concurrency: must be at least 1"},
		{[]string{"--ping-interval", "1m"}, "--ping-interval: must be shorter than --worker-timeout"},
		{[]string{"--max-failed-runs", "0", "--description", "not written"}, "--max-failed-runs: "},
		{[]string{"--tags", "a,,b"}, "--tags value 2: "},
		{[]string{"--worker-ids", "node.a"}, "--worker-ids value 1: "},
	}
	for _, tc := range cases {
		r := f.run(append([]string{"update", "welcome-1"}, tc.args...)...)
		r.wantError(t, exitUsage, `update "welcome-1": `+tc.field)
	}
	if after := mschedulertest.Doc(t, f.coll, "welcome-1"); !reflect.DeepEqual(after, before) {
		t.Errorf("document changed by refused updates:\n%v\nwas\n%v", after, before)
	}
	f.run("update", "nope", "--priority", "1").wantError(t, exitError, `update "nope": task not found`)
}
