package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// End is the write that ends one run: it removes the run's holder entry,
// appends its record, marks its history record as still to be written,
// and moves the task's counters, status and the fields bound to it, in one
// update fenced on the run.
//
// An update cannot set a status from the counters it reads, so the write
// is a set of cases whose filters split every possible state of the task
// into disjoint parts, each with its own change. The fence is in every
// filter, so at most one case matches; the caller tries the case the seen
// state falls in (Likely), and when it misses while the run still holds
// its slot, refreshes the seen state from a read (Refresh) and tries
// again.
type End struct {
	ID       bson.RawValue // the task's _id as read
	WorkerID string
	Record   stored.RunRecord
	Fence    bson.D // RunFence, or LeaseFence for a sweep

	Distinct      bool      // on success, remember the worker in done_by
	MaxFailedRuns int       // the task's max_failed_runs, as last read
	RetryAt       time.Time // on a counted failure, run_at is moved to at least this
	Now           time.Time
	RunsKept      int
	Retention     Retention

	// Seen is the task's state as last read: it picks the likely case.
	Seen Seen
	// Advance is set for a task with a plan: a run end that completes the
	// occurrence moves the task to its next planned time instead of
	// finishing it.
	Advance *Advance
}

// Seen is the part of a task that decides how a run end changes it.
type Seen struct {
	Status     stored.Status `bson:"status"`
	Running    int           `bson:"running"`
	Free       int           `bson:"free"`
	FailedRuns int           `bson:"failed_runs"`
}

// Case is one part of the split of a task's states.
type Case struct {
	filter  bson.D
	to      stored.Status // the status the write sets; empty keeps it
	was     stored.Status // with to empty: the one status the filter holds, if one
	last    bool          // the run is the task's last holder
	advance bool          // the occurrence completes: move to the next planned time
	likely  bool          // the seen state falls in this case
	Name    string
}

func (e *End) succeeded() bool { return e.Record.Outcome == stored.OutcomeSucceeded }

// freeDelta is what the run's end gives back to the task's free slots: a
// success consumes its slot for good.
func (e *End) freeDelta() int {
	if e.succeeded() {
		return 0
	}
	return 1
}

// finals are the final statuses, each of which an ended last run leaves
// as it is, the task finished for good.
var finals = []stored.Status{stored.StatusSucceeded, stored.StatusFinished, stored.StatusFailed, stored.StatusCancelled}

// Cases are every case of the split, in no order that matters.
func (e *End) Cases() []Case {
	d, m, s := e.freeDelta(), e.MaxFailedRuns, e.Seen
	last := bson.E{Key: stored.FRunning, Value: 1}
	notLast := bson.E{Key: stored.FRunning, Value: Op("$ne", 1)}
	running := bson.E{Key: stored.FStatus, Value: stored.StatusRunning}
	satisfied := bson.E{Key: stored.FFree, Value: Op("$lte", -d)} // free after this end <= 0
	unsatisfied := bson.E{Key: stored.FFree, Value: Op("$gt", -d)}
	exhausted := bson.D{{Key: stored.FMaxFailedRuns, Value: m}, {Key: stored.FFailedRuns, Value: Op("$gte", m-1)}}
	notExhausted := bson.D{{Key: stored.FMaxFailedRuns, Value: m}, {Key: stored.FFailedRuns, Value: Op("$lt", m-1)}}
	isLast, isRunning := s.Running == 1, s.Status == stored.StatusRunning
	isSatisfied, isExhausted := s.Free <= -d, s.FailedRuns >= m-1
	plan := e.Advance != nil

	var out []Case
	// The last run of a task no longer running: its status stays, and the
	// task is finished for good if that status is final. With a plan, an
	// occurrence completed while this run went on moves on now.
	for _, st := range finals {
		c := Case{filter: bson.D{last, {Key: stored.FStatus, Value: st}}, was: st, last: true,
			Name: "last run ended, task " + string(st), likely: isLast && s.Status == st}
		c.advance = plan && (st == stored.StatusSucceeded || st == stored.StatusFailed)
		out = append(out, c)
	}
	notFinal := append(bson.A{stored.StatusRunning}, finalsA()...)
	out = append(out, Case{filter: bson.D{last, {Key: stored.FStatus, Value: Op("$nin", notFinal)}}, last: true,
		Name: "last run ended, task neither running nor final", likely: isLast && !isRunning && !s.Status.Final()})
	out = append(out, Case{filter: bson.D{last, running, satisfied}, to: stored.StatusSucceeded, last: true, advance: plan,
		Name: "enough successes", likely: isLast && isRunning && isSatisfied})
	if !e.Record.Outcome.Counted() {
		return append(out,
			Case{filter: bson.D{last, running, unsatisfied}, to: stored.StatusPending, last: true,
				Name: "slots left", likely: isLast && isRunning && !isSatisfied},
			Case{filter: bson.D{notLast}, Name: "other runs going", likely: !isLast})
	}
	return append(out,
		Case{filter: append(bson.D{last, running, unsatisfied}, exhausted...), to: stored.StatusFailed, last: true, advance: plan,
			Name: "failed runs exhausted", likely: isLast && isRunning && !isSatisfied && isExhausted},
		Case{filter: append(bson.D{last, running, unsatisfied}, notExhausted...), to: stored.StatusPending, last: true,
			Name: "may be tried again", likely: isLast && isRunning && !isSatisfied && !isExhausted},
		Case{filter: append(bson.D{notLast, running}, exhausted...), to: stored.StatusFailed,
			Name: "failed runs exhausted, other runs going", likely: !isLast && isRunning && isExhausted},
		Case{filter: bson.D{notLast, {Key: "$or", Value: bson.A{bson.D{{Key: stored.FStatus, Value: Op("$ne", stored.StatusRunning)}}, notExhausted}}},
			Name: "other runs going", likely: !isLast && (!isRunning || !isExhausted)},
	)
}

func finalsA() bson.A {
	out := make(bson.A, len(finals))
	for i, s := range finals {
		out[i] = s
	}
	return out
}

// Filter is the case's filter, fenced on the run (and, when the case
// moves a plan on, on the occurrence the step was computed from).
func (e *End) Filter(c Case) bson.D {
	f := append(append(bson.D{}, e.Fence...), c.filter...)
	if c.advance {
		f = append(f, e.Advance.fence()...)
	}
	return f
}

// Likely is the case the seen state falls in, if any.
func (e *End) Likely() (Case, bool) {
	for _, c := range e.Cases() {
		if c.likely {
			return c, true
		}
	}
	return Case{}, false
}

// Update is the case's update.
func (e *End) Update(c Case) bson.D {
	if c.advance && !e.Advance.Step.Done {
		return e.advanceUpdate()
	}
	var u update
	u.Unset(stored.HolderPath(e.WorkerID))
	u.Inc(stored.FRunning, -1)
	u.Inc(stored.FRev, 1)
	if d := e.freeDelta(); d != 0 {
		u.Inc(stored.FFree, d)
	}
	switch {
	case e.succeeded():
		u.Inc(stored.FSucceeded, 1)
	case e.Record.Outcome.Counted():
		u.Inc(stored.FFailedRuns, 1)
	}
	e.pushRecord(&u)
	if e.Distinct && e.succeeded() {
		u.Push(stored.FDoneBy, e.WorkerID)
	}
	u.Set(stored.FUpdatedAt, e.Now)
	u.Set(stored.UnloggedPath(e.Record.RunID), e.Record.Finished)
	if e.Advance != nil {
		u.Set(stored.PStarted, true)
	}
	to := c.to
	if c.advance { // the plan is done
		to = stored.StatusFinished
		u.Inc(stored.PRuns, 1)
		u.Inc(stored.PSkipped, e.Advance.Step.Skipped)
		u.Inc(stored.PMissedCount, e.Advance.Step.Missed)
		u.Set(stored.PSkipNext, 0)
	}
	if to != "" {
		u.Set(stored.FStatus, to)
	}
	left := someRunLeft
	if c.last {
		left = noRunLeft
	}
	u.settle(cmpStatus(to, c.was), left, e.Now, e.Retention)
	if e.Record.Outcome.Counted() && !e.RetryAt.IsZero() && !c.advance {
		u.Max(stored.FRunAt, e.RetryAt)
	}
	return u.doc()
}

func cmpStatus(a, b stored.Status) stored.Status {
	if a != "" {
		return a
	}
	return b
}

// pushRecord appends the run's record to the task's runs, keeping the
// most recent RunsKept.
func (e *End) pushRecord(u *update) {
	u.Push(stored.FRuns, bson.D{{Key: "$each", Value: bson.A{e.Record}}, {Key: "$slice", Value: -e.RunsKept}})
}

// RefreshProjection is what a run end reads of its task to pick its case.
func RefreshProjection() bson.D {
	return bson.D{{Key: stored.FMaxFailedRuns, Value: 1}, {Key: stored.FStatus, Value: 1}, {Key: stored.FRunning, Value: 1},
		{Key: stored.FFree, Value: 1}, {Key: stored.FFailedRuns, Value: 1}, {Key: stored.FConcurrency, Value: 1},
		{Key: stored.PSkipNext, Value: 1}, {Key: stored.PPlanned, Value: 1}, {Key: stored.PRuns, Value: 1}, {Key: stored.PSkipped, Value: 1}}
}

// Refresh takes the seen state, max_failed_runs and plan position from a
// read of the task with RefreshProjection. A field there of the wrong type
// is returned as the problem: no case could match it.
func (e *End) Refresh(raw bson.Raw) *stored.Problem {
	var prob *stored.Problem
	num := func(path ...string) int {
		v := raw.Lookup(path...)
		n, ok := v.AsInt64OK()
		if !ok && v.Type != 0 && prob == nil {
			prob = stored.Problemf(joinPath(path), "must be a whole number, got %s", stored.DescribeValue(v))
		}
		return int(n)
	}
	sv := raw.Lookup(stored.FStatus)
	status, ok := sv.StringValueOK()
	if !ok && sv.Type != 0 {
		prob = stored.Problemf(stored.FStatus, "must be a string, got %s", stored.DescribeValue(sv))
	}
	e.MaxFailedRuns = num(stored.FMaxFailedRuns)
	e.Seen = Seen{Status: stored.Status(status), Running: num(stored.FRunning), Free: num(stored.FFree), FailedRuns: num(stored.FFailedRuns)}
	if a := e.Advance; a != nil {
		// The run's occurrence is the one the task is at: only this run's
		// own claim could move it since (or an operator's edit).
		pv := raw.Lookup(stored.FPlan, "planned")
		planned, ok := pv.TimeOK()
		if !ok && pv.Type != 0 && prob == nil {
			prob = stored.Problemf(stored.PPlanned, "must be a date, got %s", stored.DescribeValue(pv))
		}
		a.Planned, a.Runs, a.Skipped = planned, num(stored.FPlan, "runs"), num(stored.FPlan, "skipped")
		a.Refresh(num(stored.FConcurrency), num(stored.FPlan, "skip_next"))
		e.Record.Planned = &planned
	}
	return prob
}

func joinPath(path []string) string {
	out := path[0]
	for _, p := range path[1:] {
		out += "." + p
	}
	return out
}
