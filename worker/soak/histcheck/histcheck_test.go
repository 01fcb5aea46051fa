package histcheck

import (
	"strings"
	"testing"
	"time"
)

var epoch = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// at is epoch plus ms milliseconds.
func at(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }

// run is a run of task k by worker w from ms from to ms to; to < 0 is a run
// that never logged its end.
func run(k, id, w string, from, to int) Run {
	r := Run{Key: k, RunID: id, Worker: w, Start: at(from)}
	if to >= 0 {
		r.End = at(to)
	}
	return r
}

func record(k, id, w, outcome string, leaseUntil, finished int) Record {
	return Record{Key: k, RunID: id, Worker: w, Outcome: outcome, LeaseUntil: at(leaseUntil), Finished: at(finished)}
}

// inHistory is the history that matches the records exactly.
func inHistory(recs []Record) []HistoryRecord {
	var out []HistoryRecord
	for _, r := range recs {
		out = append(out, HistoryRecord{Key: r.Key, RunID: r.RunID, Outcome: r.Outcome})
	}
	return out
}

// succeeded records each run as succeeded, with a lease past its end.
func succeeded(runs ...Run) []Record {
	var out []Record
	for _, r := range runs {
		end := r.End
		if end.IsZero() {
			end = r.Start
		}
		out = append(out, Record{Key: r.Key, RunID: r.RunID, Worker: r.Worker, Outcome: "succeeded",
			LeaseUntil: end.Add(time.Second), Finished: end})
	}
	return out
}

// wantOnly fails the test unless the violations are exactly one per text,
// each containing its text.
func wantOnly(t *testing.T, what string, got []Violation, texts ...string) {
	t.Helper()
	if len(got) != len(texts) {
		t.Errorf("%s: %d violations %v, want %d (%q)", what, len(got), got, len(texts), texts)
		return
	}
	for i, text := range texts {
		if !strings.Contains(got[i].Text, text) {
			t.Errorf("%s: violation %d is %q, want it to contain %q", what, i, got[i].Text, text)
		}
	}
}

func TestSoundHistoriesPass(t *testing.T) {
	cases := []struct {
		name string
		in   Input
	}{
		{"one after another on one worker, touching", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w1", 1000, 2000), run("a", "r3", "w2", 2000, 2500)}
			recs := succeeded(runs...)
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"concurrency 2 on two workers", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w2", 100, 900), run("a", "r3", "w1", 1000, 1500)}
			recs := succeeded(runs...)
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 2}}
		}()},
		{"tasks apart do not add up", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, 1000), run("b", "r2", "w1", 0, 1000)}
			recs := succeeded(runs...)
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1, "b": 1}}
		}()},
		{"an expired run is cut at its lease", func() Input {
			// r1's handler went on until 3000, but its lease lapsed at 1000.
			runs := []Run{run("a", "r1", "w1", 0, 3000), run("a", "r2", "w2", 1500, 2000)}
			recs := []Record{record("a", "r1", "w1", "expired", 1000, 1200), succeeded(runs[1])[0]}
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"a killed run recorded expired is cut at its lease", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, -1), run("a", "r2", "w2", 2600, 2700)}
			recs := []Record{record("a", "r1", "w1", "expired", 2500, 2600), succeeded(runs[1])[0]}
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"a killed run recorded released is cut at its finish", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, -1), run("a", "r2", "w1", 1000, 1100)}
			recs := []Record{record("a", "r1", "w1", "released", 5000, 1000), succeeded(runs[1])[0]}
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"a killed run recorded nowhere is left out", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, -1), run("a", "r2", "w1", 100, 200)}
			recs := succeeded(runs[1])
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"a run that ended before its lease lapsed is not cut", func() Input {
			runs := []Run{run("a", "r1", "w1", 0, 500), run("a", "r2", "w2", 500, 600)}
			recs := []Record{record("a", "r1", "w1", "expired", 2500, 2600), succeeded(runs[1])[0]}
			return Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}}
		}()},
		{"nothing at all", Input{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Slack = DefaultSlack
			if rep := Check(tc.in); !rep.OK() {
				t.Errorf("violations: overlaps %v, history %v", rep.Overlaps, rep.History)
			}
		})
	}
}

func TestOverlapByOneWorker(t *testing.T) {
	// Concurrency 2 allows two runs at once, but not by one worker.
	runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w1", 999, 1500)}
	recs := succeeded(runs...)
	rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 2}, Slack: DefaultSlack})
	wantOnly(t, "overlaps", rep.Overlaps, "task a: worker w1 ran runs r1 and r2 at once")
	wantOnly(t, "history", rep.History)
}

func TestOverConcurrency(t *testing.T) {
	t.Run("concurrency 1", func(t *testing.T) {
		runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w2", 900, 2000)}
		recs := succeeded(runs...)
		rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}, Slack: DefaultSlack})
		wantOnly(t, "overlaps", rep.Overlaps, "task a (concurrency 1): 2 runs at once at 2026-11-26T10:00:00.9Z: [r1 r2]")
	})
	t.Run("concurrency 2", func(t *testing.T) {
		runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w2", 100, 1000), run("a", "r3", "w3", 999, 1200)}
		recs := succeeded(runs...)
		rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 2}, Slack: DefaultSlack})
		wantOnly(t, "overlaps", rep.Overlaps, "task a (concurrency 2): 3 runs at once")
	})
	t.Run("a killed run released late", func(t *testing.T) {
		// Released at 1000 (its finish), the next run started at 800.
		runs := []Run{run("a", "r1", "w1", 0, -1), run("a", "r2", "w2", 800, 1500)}
		recs := []Record{record("a", "r1", "w1", "released", 5000, 1000), succeeded(runs[1])[0]}
		rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}, Slack: DefaultSlack})
		wantOnly(t, "overlaps", rep.Overlaps, "2 runs at once")
	})
	t.Run("no concurrency known", func(t *testing.T) {
		runs := []Run{run("a", "r1", "w1", 0, 1000)}
		recs := succeeded(runs...)
		rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"b": 1}, Slack: DefaultSlack})
		wantOnly(t, "overlaps", rep.Overlaps, "no concurrency is known")
	})
}

// TestCutRunSlack: r1's lease lapsed at 2500 while its handler went on to
// 4000; r2 started before 2500, overlapping r1 by the slack, or by 1 ms
// more.
func TestCutRunSlack(t *testing.T) {
	const lease = 2500
	slackMS := int(DefaultSlack / time.Millisecond)
	for _, tc := range []struct {
		name     string
		overlap  int // ms
		sameWork bool
		want     []string
	}{
		{"within the slack", slackMS, false, nil},
		{"past the slack", slackMS + 1, false, []string{"task a (concurrency 1): 2 runs at once"}},
		{"within the slack, one worker", slackMS, true, nil},
		{"past the slack, one worker", slackMS + 1, true, []string{"worker w1 ran runs r1 and r2 at once", "2 runs at once"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w2 := "w2"
			if tc.sameWork {
				w2 = "w1"
			}
			runs := []Run{run("a", "r1", "w1", 0, 4000), run("a", "r2", w2, lease-tc.overlap, 3000)}
			recs := []Record{record("a", "r1", "w1", "expired", lease, lease+200), succeeded(runs[1])[0]}
			rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}, Slack: DefaultSlack})
			wantOnly(t, "overlaps", rep.Overlaps, tc.want...)
			if want := time.Duration(tc.overlap) * time.Millisecond; rep.MaxCutOverlap != want {
				t.Errorf("MaxCutOverlap %s, want %s", rep.MaxCutOverlap, want)
			}
			if rep.Cut != 1 {
				t.Errorf("Cut %d, want 1", rep.Cut)
			}
		})
	}
	t.Run("no slack for a run that ended by itself", func(t *testing.T) {
		runs := []Run{run("a", "r1", "w1", 0, 1000), run("a", "r2", "w2", 1000-slackMS, 2000)}
		recs := succeeded(runs...)
		rep := Check(Input{Runs: runs, Records: recs, History: inHistory(recs), Concurrency: map[string]int{"a": 1}, Slack: DefaultSlack})
		wantOnly(t, "overlaps", rep.Overlaps, "2 runs at once")
	})
}

func TestHistoryMismatches(t *testing.T) {
	runs := []Run{run("a", "r1", "w1", 0, 100), run("a", "r2", "w1", 100, 200), run("b", "r3", "w2", 0, 100)}
	recs := succeeded(runs...)
	for _, tc := range []struct {
		name    string
		history func(h []HistoryRecord) []HistoryRecord
		want    string
	}{
		{"missing", func(h []HistoryRecord) []HistoryRecord { return h[1:] }, "run r1 of a (succeeded) has no history record"},
		{"twice", func(h []HistoryRecord) []HistoryRecord { return append(h, h[1]) }, "run r2 of a (succeeded) is in the history 2 times"},
		{"another outcome", func(h []HistoryRecord) []HistoryRecord { h[2].Outcome = "failed"; return h }, "run r3 of b (succeeded) is in the history as failed of b"},
		{"another key", func(h []HistoryRecord) []HistoryRecord { h[0].Key = "b"; return h }, "run r1 of a (succeeded) is in the history as succeeded of b"},
		{"unknown record", func(h []HistoryRecord) []HistoryRecord {
			return append(h, HistoryRecord{Key: "a", RunID: "r9", Outcome: "expired"})
		}, "history record r9 (expired of a) matches no run of a task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(Input{Runs: runs, Records: recs, History: tc.history(inHistory(recs)),
				Concurrency: map[string]int{"a": 1, "b": 1}, Slack: DefaultSlack})
			wantOnly(t, "history", rep.History, tc.want)
			wantOnly(t, "overlaps", rep.Overlaps)
		})
	}
}
