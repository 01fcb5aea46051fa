package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// wantLines fails the test unless every "name: value" line is in out,
// whatever the alignment.
func wantLines(t *testing.T, out string, lines map[string]string) {
	t.Helper()
	for name, value := range lines {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `: +` + regexp.QuoteMeta(value) + `$`)
		if !re.MatchString(out) {
			t.Errorf("no line %q: %q in:\n%s", name, value, out)
		}
	}
}

func TestShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	lib := f.get("welcome-1")
	out := f.run("show", "welcome-1").wantOK(t).stdout
	wantLines(t, out, map[string]string{
		"key":             "welcome-1",
		"status":          "pending",
		"next run":        timeText(lib.Task.RunAt),
		"priority":        "3",
		"concurrency":     "1",
		"runs":            "1 free, 0 running, 0 succeeded, 0 failed",
		"worker ids":      "any",
		"group":           "any",
		"description":     "send the welcome email",
		"source":          "signup-api",
		"tags":            "mail, welcome",
		"timeout":         "the consumer's",
		"ping interval":   "10s",
		"worker timeout":  "30s",
		"retries":         "2, first after 1s",
		"max failed runs": "3",
		"plan":            "none",
		"created":         timeText(lib.CreatedAt),
		"updated":         timeText(lib.UpdatedAt),
		"params":          `{"to":"ada@example.com","tries":1,"since":{"$date":"2026-11-01T08:00:00Z"}}`,
	})
}

func TestShowPlan(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	lib := f.get("report-hourly")
	out := f.run("show", "report-hourly").wantOK(t).stdout
	wantLines(t, out, map[string]string{
		"concurrency":   "2",
		"description":   "hourly report",
		"source":        "billing",
		"tags":          "report",
		"plan":          "every 1 hour, forever",
		"plan window":   timeText(lib.Task.Plan.Start) + " to no end",
		"plan policies": "missed skip, overrun as missed, grace 5s",
		"plan planned":  timeText(lib.Plan.Planned),
		"plan runs":     "0 runs, 0 skipped (0 missed), 0 to skip next",
		"plan next": strings.Join([]string{timeText(lib.Plan.Upcoming[0]), timeText(lib.Plan.Upcoming[1]), timeText(lib.Plan.Upcoming[2]),
			timeText(lib.Plan.Upcoming[3]), timeText(lib.Plan.Upcoming[4])}, ", "),
	})
	if !lib.Plan.Upcoming[0].Equal(lib.Plan.Planned) || !lib.Plan.Upcoming[1].Equal(lib.Plan.Planned.Add(time.Hour)) {
		t.Errorf("upcoming %v, want the planned time, then hourly", lib.Plan.Upcoming)
	}
	f.run("cancel", "report-hourly").wantOK(t)
	wantLines(t, f.run("show", "report-hourly").wantOK(t).stdout, map[string]string{"plan next": "none: the task is cancelled"})
}

func TestShowJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run("show", "--json", "report-hourly").wantOK(t)
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("show --json printed no JSON object: %v\n%s", err, r.stdout)
	}
	for _, name := range jsonFields {
		if _, ok := got[name]; !ok {
			t.Errorf("no field %q", name)
		}
	}
	plan, _ := got["plan"].(map[string]any)
	if got["key"] != "report-hourly" || got["description"] != "hourly report" || plan["kind"] != "every" || plan["skip_next"] != 0.0 {
		t.Errorf("show --json: %v", got)
	}
}

func TestShowUnknownKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.run("show", "nope")
	r.wantError(t, exitError)
	if want := "mscheduler: show \"nope\": task not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	// A key that looks like a flag follows "--".
	f.run("show", "--", "-nope").wantError(t, exitError, `show "-nope": task not found`)
}
