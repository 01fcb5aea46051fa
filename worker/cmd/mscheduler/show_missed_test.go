package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// show prints how many of a plan's skipped planned times were missed, and
// --json carries it as missed_count.
func TestShowPlanMissed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	plan := mscheduler.Every(1, mscheduler.Minute)
	// Published 10m30s after its start: start … start+10m passed, missed.
	plan.Start = time.Now().Add(-(10*time.Minute + 30*time.Second)).Truncate(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if _, err := f.producer.Publish(ctx, mscheduler.Task[email]{Key: "late-plan", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.producer.SkipNext(ctx, "late-plan", 2); err != nil {
		t.Fatal(err)
	}
	out := f.run("show", "late-plan").wantOK(t).stdout
	wantLines(t, out, map[string]string{"plan runs": "0 runs, 11 skipped (11 missed), 2 to skip next"})

	var got taskJSON
	if err := json.Unmarshal([]byte(f.run("show", "--json", "late-plan").wantOK(t).stdout), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Plan; p == nil || p.Skipped != 11 || p.MissedCount != 11 || p.SkipNext != 2 || p.Missed != "skip" {
		t.Errorf("show --json plan %+v, want skipped 11, missed_count 11, skip_next 2, missed skip", p)
	}
}
