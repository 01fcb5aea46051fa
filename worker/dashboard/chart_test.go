package dashboard

import (
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// The chart's scale is its busiest bucket, and its buckets are labelled
// with their start, so that the axis can say what a bar means.
func TestChartScale(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration, o mscheduler.Outcome) mscheduler.RunInfo {
		return mscheduler.RunInfo{Finished: now.Add(-ago), Outcome: o}
	}
	runs := []mscheduler.RunInfo{
		at(2*time.Minute, mscheduler.OutcomeSucceeded), at(3*time.Minute, mscheduler.OutcomeFailed),
		at(4*time.Minute, mscheduler.OutcomeSucceeded), at(59*time.Minute, mscheduler.OutcomeExpired),
		at(2*time.Hour, mscheduler.OutcomeSucceeded), // before the hour: left out
	}
	b, peak := chart(runs, now)
	if len(b) != 12 || peak != 3 {
		t.Fatalf("%d buckets, peak %d; want 12 and 3", len(b), peak)
	}
	if b[0].Label != "11:00" || b[6].Label != "11:30" || b[0].Runs != 1 || b[0].Pct != 33 || b[0].FailPct != 100 {
		t.Errorf("first bucket %+v, middle label %q; want 11:00 with 1 expired run at 33%%, and 11:30", b[0], b[6].Label)
	}
	if last := b[11]; last.Runs != 3 || last.Failed != 1 || last.Pct != 100 || last.FailPct != 33 {
		t.Errorf("last bucket %+v; want 3 runs, 1 failed, full height", last)
	}
}

// A run record whose times cannot say how long it took (one missing, or a
// finish before the start, as a hand edit leaves it) shows "-", not a
// negative duration of centuries.
func TestTookText(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		started, finished time.Time
		want              string
	}{
		{start, start.Add(1500 * time.Millisecond), "1.5s"},
		{start, start, "0s"},
		{start, start.Add(-time.Hour), "-"},
		{start, time.Time{}, "-"},
		{time.Time{}, start, "-"},
	} {
		if got := tookText(tc.started, tc.finished); got != tc.want {
			t.Errorf("tookText(%s, %s) = %q, want %q", tc.started, tc.finished, got, tc.want)
		}
	}
}

// A key in a command line the page offers to copy stays one word.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"welcome-42": "welcome-42",
		"a b":        "'a b'",
		"x;rm -rf":   "'x;rm -rf'",
		"it's":       `'it'\''s'`,
		"":           "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
