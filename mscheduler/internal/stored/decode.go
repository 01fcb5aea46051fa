package stored

import (
	"fmt"
	"reflect"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// taskFields are the stored fields of a task, with their Go types.
var taskFields = FieldsOf(reflect.TypeFor[Task]())

// requiredToRun are the fields a task needs before a worker can claim and
// end a run of it: the claim's and run end's filters compare them, and a
// missing one matches nothing.
var requiredToRun = []string{FRunAt, FConcurrency, FFree, FRunning, FSucceeded, FFailedRuns, FPingIntervalMS, FWorkerTimeoutMS, FMaxFailedRuns}

// DecodeTask is the gate of task documents. It returns every field of raw
// that decodes (the others are left zero), the _id as read, and the first
// problem that keeps the task from being served as stored, or nil:
//   - a field of the wrong type, named by its path;
//   - an _id that is not a string, or a key field that is not the _id
//     (a document cloned by hand);
//   - a missing or unknown status;
//   - for a task that may be claimed (pending or running): a field the
//     claim and the run end need that is missing or out of range, or
//     counters that contradict the runs holding it.
//
// A task in another status is not run again, so only its shape and
// identity matter. DecodeTask never panics, whatever raw holds.
func DecodeTask(raw bson.Raw) (*Task, *Problem) {
	t, probs := DecodeFields(raw)
	if len(probs) > 0 {
		return t, probs[0]
	}
	prob := identityProblem(raw, t)
	if prob == nil && t.Status == StatusInvalid {
		prob = invalidNoteProblem(raw)
	}
	if prob == nil {
		prob = identityProblem(raw, t)
	}
	if prob == nil {
		prob = statusProblem(raw)
	}
	if prob == nil && t.Status.Claimable() {
		prob = runProblem(raw, t)
	}
	return t, prob
}

// DecodeFields decodes every field of a stored task that decodes, the
// others left zero, and returns every field that does not (a field of the
// wrong type, a runs that is not an array): an action on a task needs
// only some fields, and refuses only when one of those is wrong.
func DecodeFields(raw bson.Raw) (*Task, []*Problem) {
	t := &Task{}
	if _, err := raw.Elements(); err != nil {
		return t, []*Problem{Problemf(WholeDocument, "is not valid BSON: %v", err)}
	}
	probs := decodeAll(raw, taskFields, t)
	if p := shapeProblem(raw); p != nil {
		probs = append(probs, p)
	}
	// The key is the _id, whatever the key field says: a copy made by
	// hand under a new _id is that _id's, never its original's.
	t.RawID = raw.Lookup(FID)
	t.Key = IDString(t.RawID)
	return t, probs
}

// shapeProblem checks the fields that Task leaves out: runs.
func shapeProblem(raw bson.Raw) *Problem {
	v := raw.Lookup(FRuns)
	if v.Type != 0 && v.Type != bson.TypeArray && v.Type != bson.TypeNull {
		return Problemf(FRuns, "must be an array, got %s", DescribeValue(v))
	}
	return nil
}

// identityProblem checks that the document is the task its _id names.
func identityProblem(raw bson.Raw, t *Task) *Problem {
	id := raw.Lookup(FID)
	if _, ok := id.StringValueOK(); !ok {
		return Problemf(FID, "must be a string (the task key), got %s: a copy of a task made by hand gets an ObjectId; publish the task under a key of its own instead", DescribeValue(id))
	}
	if key := raw.Lookup(FKey); key.Type != 0 {
		if s, _ := key.StringValueOK(); s != t.ID {
			return Problemf(FKey, "must equal _id (%q), got %s: a copy of a task made by hand under a new _id keeps the key of the task it copied", t.ID, DescribeValue(key))
		}
	}
	return nil
}

func statusProblem(raw bson.Raw) *Problem {
	v := raw.Lookup(FStatus)
	if v.Type == 0 || v.Type == bson.TypeNull {
		return Problemf(FStatus, "is missing")
	}
	s, _ := v.StringValueOK()
	if !Status(s).Known() {
		return Problemf(FStatus, "must be one of %s, got %q", statusList(), s)
	}
	return nil
}

// invalidNoteProblem checks that an invalid task says why: a status set
// to invalid by hand, or a note removed, would leave a task that nothing
// ever looks at again, with no reason a person can find.
func invalidNoteProblem(raw bson.Raw) *Problem {
	v := raw.Lookup(FInvalid)
	if reason, _ := raw.Lookup(FInvalid, "reason").StringValueOK(); v.Type == bson.TypeEmbeddedDocument && reason != "" {
		return nil
	}
	return Problemf(FStatus, "is invalid, but no note under %s says why (set by hand?): repair the task and set it to pending, or publish it again with ResetFinished", FInvalid)
}

// queryDates are the fields of a task that queries and fences compare
// with dates: the driver decodes a string or a number there into a time
// as well, but the server compares them apart from dates, so a claim, a
// sweep or a run end would never match them.
var queryDates = []string{FRunAt}

// runProblem checks what a claim and a run end of the task need.
func runProblem(raw bson.Raw, t *Task) *Problem {
	for _, f := range requiredToRun {
		if v := raw.Lookup(f); v.Type == 0 || v.Type == bson.TypeNull {
			return Problemf(f, "is missing")
		}
	}
	for _, f := range queryDates {
		if p := DateProblem(raw, f); p != nil {
			return p
		}
	}
	if p := HolderDatesProblem(raw); p != nil {
		return p
	}
	if v := raw.Lookup(FPlan, "planned"); v.Type != 0 && v.Type != bson.TypeDateTime {
		return Problemf(PPlanned, "must be a date, got %s", DescribeValue(v))
	}
	if p := holdersProblem(t); p != nil {
		return p
	}
	return valueProblem(t)
}

// HolderDatesProblem checks that every holder's start and lease are
// dates: the sweep's fence compares the lease as stored.
func HolderDatesProblem(raw bson.Raw) *Problem {
	holders, ok := raw.Lookup(FHolders).DocumentOK()
	if !ok {
		return nil
	}
	elems, _ := holders.Elements()
	for _, e := range elems {
		h, ok := e.Value().DocumentOK()
		if !ok {
			continue // the decoder names it
		}
		for _, f := range []string{HStarted, HLeaseUntil} {
			if p := DateProblem(h, f); p != nil {
				p.Field = HolderPath(e.Key(), f)
				return p
			}
		}
	}
	return nil
}

// valueProblem checks the values of a task that decoded, as a worker needs
// them to run it.
func valueProblem(d *Task) *Problem {
	switch {
	case d.Concurrency < 1:
		return Problemf(FConcurrency, "must be at least 1, got %d", d.Concurrency)
	case d.PingIntervalMS <= 0:
		return Problemf(FPingIntervalMS, "must be positive, got %d", d.PingIntervalMS)
	case d.WorkerTimeoutMS <= d.PingIntervalMS:
		return Problemf(FWorkerTimeoutMS, "must be greater than %s (%d), got %d", FPingIntervalMS, d.PingIntervalMS, d.WorkerTimeoutMS)
	case d.MaxFailedRuns < 1:
		return Problemf(FMaxFailedRuns, "must be at least 1, got %d", d.MaxFailedRuns)
	case d.MaxRetries < -1:
		return Problemf(FMaxRetries, "must be -1 or more, got %d", d.MaxRetries)
	case d.RetryDelayMS < 0:
		return Problemf(FRetryDelayMS, "must not be negative, got %d", d.RetryDelayMS)
	case d.TimeoutMS < 0:
		return Problemf(FTimeoutMS, "must not be negative, got %d", d.TimeoutMS)
	case d.Status == StatusPending && d.Running == 0 && d.Free <= 0:
		return Problemf(FFree, "is %d on a pending task with no run going, so it never runs: to run it again, set free to concurrency (%d) and succeeded and failed_runs to 0, or publish it again with ResetFinished", d.Free, d.Concurrency)
	case d.Running == 0 && d.Free != d.Concurrency-d.Succeeded && (d.Plan == nil || d.Status == StatusPending):
		return Problemf(FFree, "must be concurrency - running - succeeded (%d), got %d: move free with concurrency", d.Concurrency-d.Succeeded, d.Free)
	}
	return nil
}

// holdersProblem checks the counters against the runs that hold the task:
// every claim and run end moves both together.
func holdersProblem(d *Task) *Problem {
	switch {
	case d.Running != len(d.Holders):
		return Problemf(FRunning, "is %d, but holders has %d run%s: every claim and run end moves both together",
			d.Running, len(d.Holders), plural(len(d.Holders)))
	case d.Status == StatusRunning && len(d.Holders) == 0:
		return Problemf(FStatus, "is running, but no run holds the task (holders is empty): set it to pending to run it again")
	}
	for w, h := range d.Holders {
		if h.Run == "" {
			return Problemf(HolderPath(w, HRun), "is missing")
		}
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func statusList() string {
	names := make([]string, len(Statuses))
	for i, s := range Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// IDString shows a stored _id for messages and logs: the key itself when
// it is a string.
func IDString(id bson.RawValue) string {
	if s, ok := id.StringValueOK(); ok {
		return s
	}
	if id.Type == 0 {
		return "(no _id)"
	}
	return fmt.Sprint(id)
}
