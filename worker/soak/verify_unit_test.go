package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/worker/soak/histcheck"
)

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestVerifierReportsHistoryChecks: the soak's verifier reports what the
// history checker finds as its checks 4 and 6, and nothing else. In runs,
// a2 (worker w2) started while a1 (w1, killed) still held the task's only
// slot: a1's lease lapsed at 2.5 s, a2 started at 1 s.
func TestVerifierReportsHistoryChecks(t *testing.T) {
	base := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	docs := map[string]*storedTask{"quick-0000": {
		Key: "quick-0000", Status: "succeeded", Params: params{Kind: kindQuick}, Concurrency: 1, MaxFailedRuns: 20,
		Succeeded: 1, FailedRuns: 1,
		Runs: []storedRun{
			{RunID: "a1", WorkerID: "w1", Started: ms(0), LeaseUntil: ms(2500), Finished: ms(2600), Outcome: "expired"},
			{RunID: "a2", WorkerID: "w2", Started: ms(1000), LeaseUntil: ms(4000), Finished: ms(1500), Outcome: "succeeded", Attempts: 1},
		},
	}}
	runs := map[string]*logRun{
		"a1": {key: "quick-0000", runID: "a1", worker: "w1", starts: []int64{ms(0).UnixNano()}},
		"a2": {key: "quick-0000", runID: "a2", worker: "w2", starts: []int64{ms(1000).UnixNano()},
			ends: []logEnd{{outcome: logSucceeded, at: ms(1500).UnixNano()}}},
	}
	// late is the same, but a2 started once a1's lease lapsed.
	late := map[string]*logRun{"a1": runs["a1"], "a2": {key: "quick-0000", runID: "a2", worker: "w2", starts: []int64{ms(2500).UnixNano()},
		ends: []logEnd{{outcome: logSucceeded, at: ms(3000).UnixNano()}}}}
	specs := map[string]spec{"quick-0000": {key: "quick-0000", kind: kindQuick, concurrency: 1, maxFailed: 20}}
	h1 := histcheck.HistoryRecord{Key: "quick-0000", RunID: "a1", Outcome: "expired"}
	h2 := histcheck.HistoryRecord{Key: "quick-0000", RunID: "a2", Outcome: "succeeded"}
	for _, tc := range []struct {
		name    string
		runs    map[string]*logRun
		history []histcheck.HistoryRecord
		want    []string
	}{
		{"overlap and a run missing from the history", runs, []histcheck.HistoryRecord{h1}, []string{"4 concurrency bound", "6 history"}},
		{"overlap", runs, []histcheck.HistoryRecord{h1, h2}, []string{"4 concurrency bound"}},
		{"a run twice in the history", late, []histcheck.HistoryRecord{h1, h2, h2}, []string{"6 history"}},
		{"sound", late, []histcheck.HistoryRecord{h1, h2}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			v := &verifier{t: rec, specs: specs, docs: docs, runs: tc.runs, workers: map[string]bool{"w1": true, "w2": true}, history: tc.history}
			sum := v.verify()
			if got := slices.Sorted(maps.Keys(sum.checks)); !slices.Equal(got, tc.want) {
				t.Errorf("checks that failed: %v, want %v; errors:\n%s", got, tc.want, strings.Join(rec.errors, "\n"))
			}
			if sum.cutAtLease != 1 {
				t.Errorf("cut at their lease: %d, want 1", sum.cutAtLease)
			}
		})
	}
}

// TestAnEndCutByTheServersKillIsExcused: a run may have lost its end to
// the server's outage when its handler ended while the server was down,
// or before it was back with the run's lease still holding at the kill; a
// run whose lease had lapsed before the kill, or whose handler ended after
// the server was back, had its chance; with no outage, nothing is excused.
func TestAnEndCutByTheServersKillIsExcused(t *testing.T) {
	kill := time.Unix(1000, 0)
	outage := span{begin: kill, end: kill.Add(3 * time.Second)}
	for _, c := range []struct {
		ended, leaseUntil time.Duration // from the kill
		want              bool
	}{
		{-20 * time.Millisecond, time.Second, true},
		{-1200 * time.Millisecond, 400 * time.Millisecond, true},
		{time.Second, -time.Second, true}, // ended while the server was down
		{-2 * time.Second, -500 * time.Millisecond, false},
		{4 * time.Second, 5 * time.Second, false},
	} {
		if got := excusedByOutage(outage, kill.Add(c.ended), kill.Add(c.leaseUntil)); got != c.want {
			t.Errorf("ended %s and lease until %s from the kill: excused %v, want %v", c.ended, c.leaseUntil, got, c.want)
		}
	}
	if excusedByOutage(span{}, time.Time{}, time.Time{}) {
		t.Error("no outage excused a run")
	}
}
