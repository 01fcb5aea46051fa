package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// sortFixture adds to the fixture three tasks due from an hour on, in an
// order by run_at and by priority unlike their keys'.
func sortFixture(t *testing.T) (*fixture, time.Time) {
	t.Helper()
	f := newFixture(t)
	t0 := time.Now().Add(time.Hour).Truncate(time.Second)
	tasks := []mscheduler.Task[email]{
		{Key: "a-late", RunAt: t0.Add(time.Hour), Priority: 1, Group: "g"},
		{Key: "b-early", RunAt: t0, Priority: 1, Group: "g"},
		{Key: "c-mid", RunAt: t0.Add(30 * time.Minute), Priority: 5},
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if _, err := f.producer.PublishMany(ctx, tasks, nil); err != nil {
		t.Fatal(err)
	}
	return f, t0
}

func TestListSortGroupAndRunAt(t *testing.T) {
	t.Parallel()
	f, t0 := sortFixture(t)
	from := t0.Format(time.RFC3339)
	cases := []struct {
		args    []string
		keys    []string
		summary string
	}{
		{[]string{"--from", from}, []string{"a-late", "b-early", "c-mid"}, "3 tasks"},
		{[]string{"--from", from, "--sort", "key"}, []string{"a-late", "b-early", "c-mid"}, "3 tasks"},
		{[]string{"--from", from, "--sort", "run_at"}, []string{"b-early", "c-mid", "a-late"}, "3 tasks"},
		{[]string{"--from", from, "--sort", "priority"}, []string{"c-mid", "b-early", "a-late"}, "3 tasks"},
		// --before is not included: c-mid is due at exactly t0+30m.
		{[]string{"--from", from, "--before", t0.Add(30 * time.Minute).Format(time.RFC3339)}, []string{"b-early"}, "1 task"},
		{[]string{"--before", from, "--sort", "run_at", "--tag", "mail"}, []string{"welcome-1", "welcome-2"}, "2 tasks"},
		{[]string{"--group", "g"}, []string{"a-late", "b-early"}, "2 tasks"},
		{[]string{"--group", "g", "--sort", "run_at"}, []string{"b-early", "a-late"}, "2 tasks"},
		{[]string{"--group", "nobody"}, nil, "0 tasks"},
		{[]string{"--sort", "priority", "--limit", "2"}, []string{"c-mid", "welcome-1"}, "2 tasks shown; more match: read on with --after welcome-1"},
		{[]string{"--from", from, "--sort", "run_at", "--limit", "1", "--after", "b-early"}, []string{"c-mid"}, "1 task shown; more match: read on with --after c-mid"},
		{[]string{"--from", from, "--sort", "run_at", "--after", "c-mid"}, []string{"a-late"}, "1 task"},
	}
	for _, tc := range cases {
		header, rows, summary := table(t, f.run(append([]string{"list"}, tc.args...)...).wantOK(t).stdout)
		if byPriority := slices.Contains(tc.args, "priority"); slices.Contains(header, "PRIORITY") != byPriority {
			t.Errorf("list %q: header %q; want a PRIORITY column exactly when sorted by priority", tc.args, header)
		} else if byPriority && len(rows) > 0 && rows[0][1] != "5" {
			t.Errorf("list %q: first row %q; want c-mid's priority 5 in the PRIORITY column", tc.args, rows[0])
		}
		if got := keys(rows); !slices.Equal(got, tc.keys) || summary != tc.summary {
			t.Errorf("list %q: keys %q, summary %q; want %q, %q", tc.args, got, summary, tc.keys, tc.summary)
		}
	}

	r := f.run("list", "--json", "--sort", "priority", "--from", from).wantOK(t)
	var got []taskJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	var jsonKeys []string
	for _, task := range got {
		jsonKeys = append(jsonKeys, task.Key)
	}
	if want := []string{"c-mid", "b-early", "a-late"}; !slices.Equal(jsonKeys, want) {
		t.Errorf("list --json --sort priority: %q, want %q", jsonKeys, want)
	}

	// Paging by run_at from a task deleted since: start again.
	f.run("delete", "b-early").wantOK(t)
	f.run("list", "--sort", "run_at", "--after", "b-early").wantError(t, exitError, "b-early", "first page")
}

func TestListSortUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--sort", "due"}, []string{"--sort", `"due"`, "run_at"}},
		{[]string{"--from", "yesterday"}, []string{"from", "RFC 3339"}},
		{[]string{"--before", "2026-12-24"}, []string{"before", "RFC 3339"}},
		{[]string{"--from", "2026-12-24T18:00:00Z", "--before", "2026-12-24T18:00:00Z"}, []string{"--before", "after --from"}},
	}
	for _, tc := range cases {
		runCommand(t, serverEnv(), append([]string{"-c", "x", "list"}, tc.args...)...).wantError(t, exitUsage, tc.want...)
	}
}
