package main

import (
	"slices"
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
	if n := f.get("report-hourly").Plan.SkipNext; n != 2 {
		t.Fatalf("skip_next %d, want 2", n)
	}
	f.run("skip", "report-hourly", "0").wantOK(t)
	if n := f.get("report-hourly").Plan.SkipNext; n != 0 {
		t.Fatalf("skip_next %d after skip 0, want 0", n)
	}
	f.run("skip", "welcome-1", "1").wantError(t, exitError, `skip "welcome-1": task "welcome-1" has no plan`)
	f.run("skip", "nope", "1").wantError(t, exitError, `skip "nope": task not found`)
	// "--" lets a negative number through to the library, which refuses it.
	f.run("skip", "report-hourly", "--", "-1").wantError(t, exitError, "invalid n")
	if !slices.Equal(f.get("welcome-1").Task.Tags, []string{"mail", "welcome"}) {
		t.Error("skip touched another task")
	}
}
