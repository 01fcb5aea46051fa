package main

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// table splits list's output into the cells of its rows, cut at the
// columns of the header, and returns the summary line. It fails the test
// if a cell does not start exactly at its column, or the columns are not
// apart by the table's padding.
func table(t *testing.T, stdout string) (header []string, rows [][]string, summary string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("list printed %q, want a header, rows and a summary", stdout)
	}
	summary = lines[len(lines)-1]
	var starts []int
	for _, m := range regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(lines[0], -1) {
		starts = append(starts, m[0])
	}
	for i, line := range lines[:len(lines)-1] {
		if strings.Contains(line, "\t") {
			t.Errorf("line %d has a tab: %q", i, line)
		}
		var cells []string
		for c, start := range starts {
			aligned := len(line) > start && line[start] != ' ' && (c == 0 || line[start-2:start] == "  ")
			if !aligned {
				t.Fatalf("line %d: column %d does not start at offset %d:\n%s\n%s", i, c, start, lines[0], line)
			}
			end := len(line)
			if c+1 < len(starts) {
				end = starts[c+1]
			}
			cells = append(cells, strings.TrimSpace(line[start:end]))
		}
		if i == 0 {
			header = cells
		} else {
			rows = append(rows, cells)
		}
	}
	return header, rows, summary
}

func keys(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[0])
	}
	return out
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	header, rows, summary := table(t, f.run("list").wantOK(t).stdout)

	wantHeader := []string{"KEY", "STATUS", "RUNNING", "SUCCEEDED", "FAILED", "NEXT RUN", "TAGS", "DESCRIPTION"}
	if !slices.Equal(header, wantHeader) {
		t.Errorf("header %q, want %q", header, wantHeader)
	}
	if summary != "3 tasks" {
		t.Errorf("summary %q, want \"3 tasks\"", summary)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %q", len(rows), rows)
	}
	// Truncated, one line, and cut with a mark.
	desc := rows[2][7]
	if utf8.RuneCountInString(desc) != descriptionWidth || !strings.HasSuffix(desc, "…") || !strings.HasPrefix(desc, "a second welcome, with a tab,") {
		t.Errorf("long description shown as %q, want its first %d characters ending in …", desc, descriptionWidth)
	}
	want := [][]string{
		{"report-hourly", "pending", "0", "0/2", "0/3", timeText(f.get("report-hourly").Task.RunAt), "report", "hourly report"},
		{"welcome-1", "pending", "0", "0/1", "0/3", timeText(f.get("welcome-1").Task.RunAt), "mail,welcome", "send the welcome email"},
		{"welcome-2", "pending", "0", "0/1", "0/3", timeText(f.get("welcome-2").Task.RunAt), "mail", desc},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows\n%q\nwant\n%q", rows, want)
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		args    []string
		keys    []string
		summary string
	}{
		{[]string{"--tag", "mail"}, []string{"welcome-1", "welcome-2"}, "2 tasks"},
		{[]string{"--tag", "mail", "--tag", "welcome"}, []string{"welcome-1"}, "1 task"},
		{[]string{"--tag", "nobody"}, nil, "0 tasks"},
		{[]string{"--status", "finished"}, nil, "0 tasks"},
		{[]string{"--status", "failed", "--status", "pending", "--tag", "report"}, []string{"report-hourly"}, "1 task"},
		{[]string{"--limit", "2"}, []string{"report-hourly", "welcome-1"}, "2 tasks shown; more match: read on with --after welcome-1"},
		{[]string{"--limit", "3"}, []string{"report-hourly", "welcome-1", "welcome-2"}, "3 tasks"},
	}
	for _, tc := range cases {
		_, rows, summary := table(t, f.run(append([]string{"list"}, tc.args...)...).wantOK(t).stdout)
		if got := keys(rows); !slices.Equal(got, tc.keys) || summary != tc.summary {
			t.Errorf("list %q: keys %q, summary %q; want %q, %q", tc.args, got, summary, tc.keys, tc.summary)
		}
	}
}

// jsonFields are the field names --json promises.
var jsonFields = []string{
	"key", "status", "paused", "priority", "run_at", "concurrency", "distinct_workers",
	"free", "running", "succeeded", "failed_runs", "worker_ids", "group",
	"ping_interval_ms", "worker_timeout_ms", "max_retries", "retry_delay_ms", "max_failed_runs", "timeout_ms",
	"description", "source", "tags", "plan", "created_at", "updated_at", "params",
}

func TestListJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run("list", "--json", "--tag", "mail").wantOK(t)
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("list --json printed no JSON array: %v\n%s", err, r.stdout)
	}
	if len(got) != 2 || got[0]["key"] != "welcome-1" || got[1]["key"] != "welcome-2" {
		t.Fatalf("list --json --tag mail: %v, want welcome-1 and welcome-2", got)
	}
	for _, task := range got {
		for _, name := range jsonFields {
			if _, ok := task[name]; !ok {
				t.Errorf("task %v has no field %q", task["key"], name)
			}
		}
	}

	// Every field read back equals what the library reads.
	var typed []taskJSON
	if err := json.Unmarshal([]byte(r.stdout), &typed); err != nil {
		t.Fatal(err)
	}
	w, lib := typed[0], f.get("welcome-1")
	checks := []struct {
		field     string
		got, want any
	}{
		{"description", w.Description, lib.Task.Description},
		{"source", w.Source, lib.Task.Source},
		{"tags", w.Tags, lib.Task.Tags},
		{"priority", w.Priority, 3},
		{"concurrency", w.Concurrency, lib.Task.Concurrency},
		{"free", w.Free, lib.Free},
		{"status", w.Status, string(lib.Status)},
		{"worker_ids", w.WorkerIDs, []string{}},
		{"ping_interval_ms", w.PingIntervalMS, lib.Task.PingInterval.Milliseconds()},
		{"worker_timeout_ms", w.WorkerTimeoutMS, lib.Task.WorkerTimeout.Milliseconds()},
		{"max_retries", w.MaxRetries, lib.Task.MaxRetries},
		{"retry_delay_ms", w.RetryDelayMS, lib.Task.RetryDelay.Milliseconds()},
		{"max_failed_runs", w.MaxFailedRuns, lib.Task.MaxFailedRuns},
		{"run_at", w.RunAt.Equal(lib.Task.RunAt), true},
		{"created_at", w.CreatedAt.Equal(lib.CreatedAt), true},
		{"plan", w.Plan, (*planJSON)(nil)},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %#v, want %#v", c.field, c.got, c.want)
		}
	}
	var params map[string]any
	if err := json.Unmarshal(w.Params, &params); err != nil {
		t.Fatalf("params %s: %v", w.Params, err)
	}
	wantParams := map[string]any{"to": "ada@example.com", "tries": 1.0, "since": map[string]any{"$date": "2026-11-01T08:00:00Z"}}
	if !reflect.DeepEqual(params, wantParams) {
		t.Errorf("params %v, want %v", params, wantParams)
	}
}

func TestListJSONPlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var got []taskJSON
	r := f.run("list", "--json", "--tag", "report").wantOK(t)
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 {
		t.Fatalf("list --json --tag report: %v\n%s", err, r.stdout)
	}
	lib := f.get("report-hourly")
	p := got[0].Plan
	if p == nil {
		t.Fatal("plan is null")
	}
	if p.Kind != "every" || p.Every != 1 || p.Unit != "hour" || p.Spec != "every 1 hour" || p.Repeat != -1 ||
		p.Zone != "UTC" || p.Missed != "skip" || p.GraceMS != 5000 {
		t.Errorf("plan %+v, want every 1 hour, forever, UTC, missed skip, grace 5s", *p)
	}
	if !p.Planned.Equal(lib.Plan.Planned) || !p.Start.Equal(lib.Task.Plan.Start) || !got[0].RunAt.Equal(lib.Task.RunAt) {
		t.Errorf("planned %s, start %s, run_at %s; want %s, %s, %s", p.Planned, p.Start, got[0].RunAt, lib.Plan.Planned, lib.Task.Plan.Start, lib.Task.RunAt)
	}
	if string(got[0].Params) == "" {
		t.Error("params missing")
	}
}

// A list cut by --limit says so on stderr, keeping stdout an array.
func TestListJSONLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run("list", "--json", "--limit", "1")
	var got []taskJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 || r.code != 0 {
		t.Fatalf("exit %d, %d tasks, %v; want 1 task", r.code, len(got), err)
	}
	if !strings.Contains(r.stderr, "read on with --after report-hourly") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying the limit cut the list", r.stderr)
	}
}
