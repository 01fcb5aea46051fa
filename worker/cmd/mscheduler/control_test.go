package main

import (
	"slices"
	"strings"
	"testing"
)

func TestPauseResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if r := f.run("pause", "welcome-1").wantOK(t); r.stdout != "paused welcome-1\n" {
		t.Errorf("pause printed %q", r.stdout)
	}
	if !f.get("welcome-1").Paused {
		t.Fatal("not paused")
	}
	_, rows, _ := table(t, f.run("list", "--tag", "welcome").wantOK(t).stdout)
	if rows[0][1] != "pending (paused)" {
		t.Errorf("list shows status %q, want \"pending (paused)\"", rows[0][1])
	}
	wantLines(t, f.run("show", "welcome-1").wantOK(t).stdout, map[string]string{"status": "pending (paused)"})

	if r := f.run("resume", "welcome-1").wantOK(t); r.stdout != "resumed welcome-1\n" {
		t.Errorf("resume printed %q", r.stdout)
	}
	if f.get("welcome-1").Paused {
		t.Fatal("still paused")
	}
	f.run("pause", "nope").wantError(t, exitError, `pause "nope": task not found`)
	f.run("resume", "nope").wantError(t, exitError, `resume "nope": task not found`)
}

func TestSkip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if r := f.run("skip", "report-hourly", "2").wantOK(t); r.stdout != "skipping 2 planned times of report-hourly\n" {
		t.Errorf("skip printed %q", r.stdout)
	}
	skipped := f.get("report-hourly")
	if n := skipped.Plan.SkipNext; n != 2 {
		t.Fatalf("skip_next %d, want 2", n)
	}
	// list and show give the first planned time that will run, not the
	// stored run_at where the plan wakes to skip.
	want := timeText(skipped.Plan.Upcoming[0])
	if !skipped.Plan.Upcoming[0].After(skipped.Task.RunAt) {
		t.Fatalf("upcoming %s not after run_at %s", want, timeText(skipped.Task.RunAt))
	}
	_, rows, _ := table(t, f.run("list", "--tag", "report").wantOK(t).stdout)
	if len(rows) != 1 || !slices.Contains(rows[0], want) {
		t.Errorf("list rows %q, want next run %s", rows, want)
	}
	if !strings.Contains(f.run("show", "report-hourly").wantOK(t).stdout, "next run:        "+want+"\n") {
		t.Errorf("show does not give next run %s", want)
	}
	f.run("skip", "report-hourly", "0").wantOK(t)
	if n := f.get("report-hourly").Plan.SkipNext; n != 0 {
		t.Fatalf("skip_next %d after skip 0, want 0", n)
	}
	f.run("skip", "welcome-1", "1").wantError(t, exitError, `skip "welcome-1": task "welcome-1" has no plan`)
	f.run("skip", "nope", "1").wantError(t, exitError, `skip "nope": task not found`)
	// "--" lets a negative number through to the library, which refuses it.
	f.run("skip", "report-hourly", "--", "-1").wantError(t, exitUsage, `skip "report-hourly": N: must be from 0`)
	if !slices.Equal(f.get("welcome-1").Task.Tags, []string{"mail", "welcome"}) {
		t.Error("skip touched another task")
	}
}
