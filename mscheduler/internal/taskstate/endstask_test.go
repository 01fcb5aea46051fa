package taskstate

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// TestEndsTaskSaysWhichWritesEndATask: the writes that set a final status
// end the task, whether runs go on or not; those that leave it to run do
// not.
func TestEndsTaskSaysWhichWritesEndATask(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	r := Retention{Succeeded: time.Hour, Failed: time.Hour}
	pending := &stored.Task{Status: stored.StatusPending, Concurrency: 1, Free: 1}
	running := &stored.Task{Status: stored.StatusRunning, Concurrency: 1, Running: 1}
	cancelled := &stored.Task{Status: stored.StatusCancelled, Concurrency: 1, Free: 1}
	paused := &stored.Task{Status: stored.StatusPending, Paused: true, Concurrency: 1, Free: 1, Plan: &stored.Plan{Planned: now}}
	two := 2
	succeeded := &stored.Task{Status: stored.StatusPending, Concurrency: 3, Free: 1, Succeeded: 2}
	must := func(u bson.D, why string) bson.D {
		if why != "" {
			t.Fatalf("not applicable: %s", why)
		}
		return u
	}
	giveBack := func(done bool) *FirstStart {
		return &FirstStart{ID: KeyID("k"), WorkerID: "w", RunID: "r", Planned: now, Concurrency: 1, Now: now, Retention: r,
			Step: Step{Next: now.Add(time.Hour), Done: done}}
	}
	for _, c := range []struct {
		name   string
		ends   bool
		update bson.D
	}{
		{"cancel of a pending task", true, must(Cancel(pending, now, r))},
		{"cancel of a running task", true, must(Cancel(running, now, r))},
		{"resume to the plan's end", true, must(Resume(paused, &Step{Done: true}, now, r))},
		{"concurrency lowered to the successes", true, must(Edit{Concurrency: &two}.Apply(succeeded, now, r))},
		{"give back that finishes the plan", true, giveBack(true).GiveBack()},
		{"give back to a later planned time", false, giveBack(false).GiveBack()},
		{"retarget", false, giveBack(false).Retarget()},
		{"retry", false, must(Retry(cancelled, now, r))},
		{"resume to a later planned time", false, must(Resume(paused, &Step{Next: now.Add(time.Hour)}, now, r))},
		{"run now", false, must(RunNow(pending, now))},
		{"pause", false, Pause(now)},
	} {
		if got := EndsTask(c.update); got != c.ends {
			t.Errorf("%s: EndsTask = %v, want %v", c.name, got, c.ends)
		}
	}
}
