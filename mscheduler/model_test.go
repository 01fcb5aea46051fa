package mscheduler_test

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// The reference model of a task, as the package documentation describes
// its state: the state-machine test follows it step by step, and the
// interleaving explorer predicts with it the serial orders of an operation
// and an action. Each transition is a method; an action that may be
// refused has a can method saying when it applies, as the documentation
// of the action says.

// mTask is the reference model of a task.
type mTask struct {
	conc, maxFailed int
	distinct, plan  bool
	status          mscheduler.Status
	succ, failed    int
	holders         map[string]mHold // by worker
	paused          bool
	doneBy          map[string]bool
}

type mHold struct {
	run   string
	lease time.Time
}

// publishedTask is the model of task as a publish inserts it.
func publishedTask(task mscheduler.Task[map[string]any]) *mTask {
	return &mTask{
		conc: cmp.Or(task.Concurrency, mscheduler.ConcurrencyDefault), maxFailed: cmp.Or(task.MaxFailedRuns, mscheduler.MaxFailedRunsDefault),
		distinct: task.DistinctWorkers, plan: task.Plan != nil,
		status: mscheduler.StatusPending, holders: map[string]mHold{}, doneBy: map[string]bool{},
	}
}

func (t *mTask) clone() *mTask {
	c := *t
	c.holders, c.doneBy = maps.Clone(t.holders), maps.Clone(t.doneBy)
	return &c
}

func (t *mTask) free() int { return t.conc - len(t.holders) - t.succ }

// finishedForGood is when retention may delete the task.
func (t *mTask) finishedForGood() bool { return t.status.Final() && len(t.holders) == 0 }

// claimableBy says worker w may claim a slot of the task, as far as its
// state goes (not its run_at, worker ids or plan).
func (t *mTask) claimableBy(w string) bool {
	_, held := t.holders[w]
	return t.status.Claimable() && t.free() > 0 && !t.paused && !(t.distinct && t.doneBy[w]) && !held
}

// claim takes a slot for worker w's run h.
func (t *mTask) claim(w string, h mHold) {
	t.holders[w] = h
	if t.status == mscheduler.StatusPending {
		t.status = mscheduler.StatusRunning
	}
}

// end applies the end of worker w's run, as the package documentation of
// the run end says.
func (t *mTask) end(w string, outcome mscheduler.Outcome) {
	delete(t.holders, w)
	counted := outcome == mscheduler.OutcomeFailed || outcome == mscheduler.OutcomeExpired
	switch {
	case outcome == mscheduler.OutcomeSucceeded:
		t.succ++
		if t.distinct {
			t.doneBy[w] = true
		}
	case counted:
		t.failed++
	}
	if t.status != mscheduler.StatusRunning || t.plan {
		return // a plan is followed from the stored task
	}
	last := len(t.holders) == 0
	switch {
	case last && t.free() <= 0:
		t.status = mscheduler.StatusSucceeded
	case counted && t.failed >= t.maxFailed:
		t.status = mscheduler.StatusFailed
	case last:
		t.status = mscheduler.StatusPending
	}
}

// lapsed are the workers whose lease lapsed before now, in order: a sweep
// expires their runs.
func (t *mTask) lapsed(now time.Time) []string {
	var out []string
	for _, w := range slices.Sorted(maps.Keys(t.holders)) {
		if t.holders[w].lease.Before(now) {
			out = append(out, w)
		}
	}
	return out
}

func (t *mTask) canCancel() bool { return !t.status.Final() }

func (t *mTask) cancel() { t.status = mscheduler.StatusCancelled }

func (t *mTask) canRetry() bool {
	retryable := t.status == mscheduler.StatusFailed || t.status == mscheduler.StatusCancelled || t.status == mscheduler.StatusInvalid
	return retryable && !(t.free() <= 0 && len(t.holders) == 0)
}

func (t *mTask) retry() {
	t.failed, t.status = 0, mscheduler.StatusPending
	if len(t.holders) > 0 {
		t.status = mscheduler.StatusRunning
	}
}

func (t *mTask) canRunNow() bool { return t.status == mscheduler.StatusPending && !t.paused }

func (t *mTask) canResume() bool { return t.paused }

// canResize says the concurrency may become conc: the current occurrence
// of a plan completes only by its runs.
func (t *mTask) canResize(conc int) bool {
	return !(t.plan && conc != t.conc && (conc < t.succ || conc == t.succ && len(t.holders) == 0))
}

// resize sets the concurrency, and the status of a plain task no run
// holds: succeeded with enough successes, pending with too few.
func (t *mTask) resize(conc int) {
	t.conc = conc
	if t.plan || len(t.holders) > 0 {
		return
	}
	switch {
	case t.status == mscheduler.StatusSucceeded && t.free() > 0:
		t.status = mscheduler.StatusPending
	case t.status == mscheduler.StatusPending && t.free() <= 0:
		t.status = mscheduler.StatusSucceeded
	}
}

// canDelete says a delete without force applies: no run holds the task.
func (t *mTask) canDelete() bool { return len(t.holders) == 0 }
