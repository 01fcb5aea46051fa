package taskstate

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

var allOutcomes = []stored.Outcome{stored.OutcomeSucceeded, stored.OutcomeFailed, stored.OutcomeExpired,
	stored.OutcomeReleased, stored.OutcomeCancelled, stored.OutcomeRevoked}

// everyStatus is every status a task can hold, a hand-edited one included.
var everyStatus = append(append([]stored.Status{}, stored.Statuses...), "done", "")

// TestEndCasesSplitEveryState checks, over a grid of every state a run
// end can meet, that the cases split it: exactly one case matches, it is
// the one the state as seen picks, and its write leaves the fields bound
// to the status as the package documentation says.
func TestEndCasesSplitEveryState(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	r := Retention{Succeeded: time.Hour, Failed: 2 * time.Hour}
	for _, outcome := range allOutcomes {
		for _, plan := range []bool{false, true} {
			for _, status := range everyStatus {
				for running := 1; running <= 3; running++ {
					for free := -2; free <= 3; free++ {
						for m := 1; m <= 3; m++ {
							for failed := 0; failed <= 3; failed++ {
								seen := Seen{Status: status, Running: running, Free: free, FailedRuns: failed}
								e := &End{ID: KeyID("k"), WorkerID: "w", Record: stored.RunRecord{RunID: "r", Outcome: outcome, Finished: now},
									Fence: RunFence(KeyID("k"), "w", "r"), MaxFailedRuns: m, Now: now, RunsKept: 5, Retention: r, Seen: seen}
								if plan {
									e.Advance = &Advance{Planned: now, Concurrency: 2, Step: Step{Next: now.Add(time.Hour)}}
								}
								checkSplit(t, e, seen, m)
							}
						}
					}
				}
			}
		}
	}
}

func checkSplit(t *testing.T, e *End, seen Seen, m int) {
	t.Helper()
	state := map[string]any{
		stored.FStatus: string(seen.Status), stored.FRunning: seen.Running, stored.FFree: seen.Free,
		stored.FFailedRuns: seen.FailedRuns, stored.FMaxFailedRuns: m,
	}
	var matched []Case
	for _, c := range e.Cases() {
		if matches(c.filter, state) {
			matched = append(matched, c)
		}
	}
	if len(matched) != 1 {
		names := []string{}
		for _, c := range matched {
			names = append(names, c.Name)
		}
		t.Fatalf("outcome %s, plan %v, state %+v: %d cases match %v, want exactly one", e.Record.Outcome, e.Advance != nil, seen, len(matched), names)
	}
	c := matched[0]
	if likely, ok := e.Likely(); !ok || likely.Name != c.Name {
		t.Fatalf("state %+v: the seen state picks %q, the filters %q", seen, likely.Name, c.Name)
	}
	checkBound(t, seen, c, e.Update(c), e.Retention)
}

// checkBound checks the update of a case against the invariants of the
// fields bound to the status.
func checkBound(t *testing.T, seen Seen, c Case, upd bson.D, r Retention) {
	t.Helper()
	set, unset := opFields(upd, "$set"), opFields(upd, "$unset")
	status := seen.Status
	if to, ok := set[stored.FStatus]; ok {
		status = to.(stored.Status)
	}
	left := seen.Running - 1
	_, expireSet := set[stored.FExpireAt]
	_, expireUnset := unset[stored.FExpireAt]
	forGood := status.Final() && left == 0
	switch {
	case forGood && r.TaskExpiry(status, time.Time{}) != nil && !expireSet:
		t.Fatalf("case %q (state %+v) leaves the task %s with no run, but sets no expire_at: %v", c.Name, seen, status, upd)
	case !forGood && !expireUnset:
		t.Fatalf("case %q (state %+v) leaves the task %s with %d runs, but does not remove expire_at: %v", c.Name, seen, status, left, upd)
	}
	if _, ok := unset[stored.FNextExpiry]; left == 0 && !ok {
		t.Fatalf("case %q (state %+v) frees the last run but leaves next_expiry: %v", c.Name, seen, upd)
	}
	if _, ok := unset[stored.FInvalid]; status != stored.StatusInvalid && status.Known() && !ok && c.to != "" {
		t.Fatalf("case %q sets status %s but leaves the invalid note: %v", c.Name, status, upd)
	}
}

func opFields(upd bson.D, op string) map[string]any {
	out := map[string]any{}
	for _, e := range upd {
		if e.Key == op {
			for _, f := range e.Value.(bson.D) {
				out[f.Key] = f.Value
			}
		}
	}
	return out
}

// TestAdvanceRemovesExpireAt is the first bug of its class: a recurring
// task failed by one run while another went on carried expire_at into its
// next occurrence, and retention deleted it live.
func TestAdvanceRemovesExpireAt(t *testing.T) {
	now := time.Now()
	e := &End{ID: KeyID("k"), WorkerID: "w", Record: stored.RunRecord{RunID: "r", Outcome: stored.OutcomeSucceeded, Finished: now},
		Fence: RunFence(KeyID("k"), "w", "r"), MaxFailedRuns: 1, Now: now, RunsKept: 5, Retention: Retention{Succeeded: time.Hour, Failed: time.Hour},
		Seen:    Seen{Status: stored.StatusFailed, Running: 1, Free: 1, FailedRuns: 1},
		Advance: &Advance{Planned: now, Concurrency: 2, Step: Step{Next: now.Add(time.Minute)}}}
	c, ok := e.Likely()
	if !ok || !c.advance {
		t.Fatalf("likely case %q, advance %v: want the occurrence to move on", c.Name, c.advance)
	}
	if _, ok := opFields(e.Update(c), "$unset")[stored.FExpireAt]; !ok {
		t.Fatalf("the advance to the next planned time leaves expire_at: %v", e.Update(c))
	}
}
