package taskstate

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Violation is an invariant that a stored task breaks.
type Violation struct {
	Invariant string // its name, as listed in the package documentation
	Detail    string
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// Check returns every invariant of the package documentation that the
// stored task raw breaks; none for a task that only the library wrote.
// Tests call it after every write; r is the retention the writers used.
func Check(raw bson.Raw, r Retention) []Violation {
	t, prob := stored.DecodeTask(raw)
	var out []Violation
	add := func(name, format string, args ...any) {
		out = append(out, Violation{Invariant: name, Detail: fmt.Sprintf(format, args...)})
	}
	if prob != nil {
		add("readable", "%v", prob)
		return out
	}
	if t.Running != len(t.Holders) {
		add("holders", "running is %d with %d holders", t.Running, len(t.Holders))
	}
	for w, h := range t.Holders {
		if h.Run == "" || h.LeaseUntil.Before(h.Started) {
			add("holders", "holder %s: run %q, started %s, lease until %s", w, h.Run, h.Started, h.LeaseUntil)
		}
	}
	switch t.Status {
	case stored.StatusPending:
		if t.Running != 0 {
			add("status", "pending with %d runs going", t.Running)
		}
		if t.Free <= 0 {
			add("status", "pending with no free slot (free %d): it would never run", t.Free)
		}
	case stored.StatusRunning:
		if t.Running < 1 {
			add("status", "running with no run going")
		}
	case stored.StatusSucceeded, stored.StatusFinished:
		if t.Running != 0 {
			add("status", "%s with %d runs going", t.Status, t.Running)
		}
	}
	if t.Free != t.Concurrency-t.Running-t.Succeeded {
		add("free", "free %d, concurrency %d, running %d, succeeded %d", t.Free, t.Concurrency, t.Running, t.Succeeded)
	}
	if t.Running < 0 || t.Succeeded < 0 || t.FailedRuns < 0 {
		add("counters", "running %d, succeeded %d, failed_runs %d", t.Running, t.Succeeded, t.FailedRuns)
	}
	out = append(out, boundViolations(t, r)...)
	return out
}

// boundViolations checks the fields bound to the status.
func boundViolations(t *stored.Task, r Retention) []Violation {
	var out []Violation
	add := func(name, format string, args ...any) {
		out = append(out, Violation{Invariant: name, Detail: fmt.Sprintf(format, args...)})
	}
	forGood := t.Status.Final() && t.Running == 0
	switch {
	case t.ExpireAt != nil && !forGood:
		add("expire_at", "set on a task %s with %d runs going: retention would delete a live task", t.Status, t.Running)
	case t.ExpireAt == nil && forGood && r.TaskExpiry(t.Status, time.Time{}) != nil:
		add("expire_at", "missing on a task finished for good (%s)", t.Status)
	}
	if (t.Invalid != nil) != (t.Status == stored.StatusInvalid) {
		add("invalid", "note %v on a task %s", t.Invalid != nil, t.Status)
	}
	switch {
	case len(t.Holders) == 0 && t.NextExpiry != nil:
		add("next_expiry", "set on a task no run holds")
	case len(t.Holders) > 0 && t.NextExpiry == nil:
		add("next_expiry", "missing on a task %d runs hold: the sweep would never see their leases", len(t.Holders))
	case len(t.Holders) > 0:
		for w, h := range t.Holders {
			if t.NextExpiry.After(h.LeaseUntil) {
				add("next_expiry", "%s is after the lease of holder %s (%s)", t.NextExpiry, w, h.LeaseUntil)
			}
		}
	}
	return out
}
