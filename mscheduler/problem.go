package mscheduler

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Task documents are edited by hand in mongosh and Compass, so a worker
// reads them as untrusted input: before it runs a task, and whenever a
// write about one is refused, it inspects the stored document and names
// the first field that is wrong.

// problem says what is wrong with a stored task document.
type problem struct {
	field  string // as stored: max_failed_runs, plan.cron, ...
	reason string
}

func (p *problem) Error() string { return "field " + p.field + " " + p.reason }

// knownStatuses are every status the library writes.
var knownStatuses = []Status{StatusPending, StatusRunning, StatusSucceeded, StatusFailed, StatusFinished, StatusCancelled, StatusInvalid}

// requiredToRun are the fields a task needs before a worker can claim and
// end a run of it: the claim's and run end's filters compare them, and a
// missing one matches nothing.
var requiredToRun = []string{fRunAt, fConcurrency, fFree, fRunning, fSucceeded, fFailedRuns, fPingIntervalMS, fWorkerTimeoutMS, fMaxFailedRuns}

// fieldsOf maps the bson field names of a struct type to their Go types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("bson"), ",")
		if tag != "" && tag != "-" {
			out[tag] = t.Field(i).Type
		}
	}
	return out
}

var taskFields = fieldsOf(reflect.TypeFor[taskDoc]())

// inspect returns the first problem of a stored task document, or nil. It
// never panics, whatever the document holds.
func inspect(raw bson.Raw) *problem {
	elems, err := raw.Elements()
	if err != nil {
		return &problem{field: "(document)", reason: fmt.Sprintf("is not valid BSON: %v", err)}
	}
	if p := inspectTypes(elems); p != nil {
		return p
	}
	var doc taskDoc
	if err := bson.Unmarshal(raw, &doc); err != nil { // not reached when every field decodes alone
		return &problem{field: "(document)", reason: fmt.Sprintf("cannot be decoded: %v", err)}
	}
	status, _ := raw.Lookup(fStatus).StringValueOK()
	switch {
	case raw.Lookup(fStatus).Type == 0:
		return &problem{field: fStatus, reason: "is missing"}
	case !slices.Contains(knownStatuses, Status(status)):
		return &problem{field: fStatus, reason: fmt.Sprintf("must be one of %s, got %q", statusList(), status)}
	case doc.Status != StatusPending && doc.Status != StatusRunning:
		return nil // a finished task is not run again: its fields matter no more
	}
	for _, f := range requiredToRun {
		if v := raw.Lookup(f); v.Type == 0 || v.Type == bson.TypeNull {
			return &problem{field: f, reason: "is missing"}
		}
	}
	return inspectValues(&doc)
}

// inspectTypes decodes every known field alone, so that a wrong type is
// named by its field; sub-documents (plan, holders) are inspected field by
// field too.
func inspectTypes(elems []bson.RawElement) *problem {
	for _, e := range elems {
		if e.Key() == fRuns && e.Value().Type != bson.TypeArray && e.Value().Type != bson.TypeNull {
			return &problem{fRuns, fmt.Sprintf("must be an array, got %s", describeValue(e.Value()))}
		}
		if typ, ok := taskFields[e.Key()]; ok {
			if p := inspectValue(e.Key(), typ, e.Value()); p != nil {
				return p
			}
		}
	}
	return nil
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawValueType = reflect.TypeFor[bson.RawValue]()
)

func inspectValue(path string, typ reflect.Type, v bson.RawValue) *problem {
	if typ.Kind() == reflect.Pointer && v.Type != bson.TypeNull {
		typ = typ.Elem()
	}
	doc, isDoc := v.DocumentOK()
	switch {
	case isDoc && typ.Kind() == reflect.Struct && typ != timeType && typ != rawValueType:
		fields := fieldsOf(typ)
		elems, _ := doc.Elements()
		for _, e := range elems {
			if ft, ok := fields[e.Key()]; ok {
				if p := inspectValue(path+"."+e.Key(), ft, e.Value()); p != nil {
					return p
				}
			}
		}
		return nil
	case isDoc && typ.Kind() == reflect.Map && typ.Elem().Kind() == reflect.Struct:
		elems, _ := doc.Elements()
		for _, e := range elems {
			if p := inspectValue(path+"."+e.Key(), typ.Elem(), e.Value()); p != nil {
				return p
			}
		}
		return nil
	}
	if err := v.Unmarshal(reflect.New(typ).Interface()); err != nil {
		return &problem{path, fmt.Sprintf("must be %s, got %s", describeType(typ), describeValue(v))}
	}
	return nil
}

// inspectValues checks the values of a task that decoded, as a worker
// needs them to run it.
func inspectValues(d *taskDoc) *problem {
	switch {
	case d.Concurrency < 1:
		return &problem{fConcurrency, fmt.Sprintf("must be at least 1, got %d", d.Concurrency)}
	case d.PingIntervalMS <= 0:
		return &problem{fPingIntervalMS, fmt.Sprintf("must be positive, got %d", d.PingIntervalMS)}
	case d.WorkerTimeoutMS <= d.PingIntervalMS:
		return &problem{fWorkerTimeoutMS, fmt.Sprintf("must be greater than %s (%d), got %d", fPingIntervalMS, d.PingIntervalMS, d.WorkerTimeoutMS)}
	case d.MaxFailedRuns < 1:
		return &problem{fMaxFailedRuns, fmt.Sprintf("must be at least 1, got %d", d.MaxFailedRuns)}
	case d.MaxRetries < NoRetries:
		return &problem{fMaxRetries, fmt.Sprintf("must be -1 or more, got %d", d.MaxRetries)}
	case d.RetryDelayMS < 0:
		return &problem{fRetryDelayMS, fmt.Sprintf("must not be negative, got %d", d.RetryDelayMS)}
	case d.TimeoutMS < 0:
		return &problem{fTimeoutMS, fmt.Sprintf("must not be negative, got %d", d.TimeoutMS)}
	case d.Status == StatusPending && d.Running == 0 && d.Free <= 0:
		return &problem{fFree, fmt.Sprintf("is %d on a pending task with no run going, so it never runs: to run it again, set free to concurrency (%d) and succeeded and failed_runs to 0, or publish it again with ResetFinished", d.Free, d.Concurrency)}
	case d.Status == StatusPending && d.Running == 0 && d.Plan == nil && d.Free != d.Concurrency-d.Succeeded:
		return &problem{fFree, fmt.Sprintf("must be concurrency - running - succeeded (%d), got %d: move free with concurrency", d.Concurrency-d.Succeeded, d.Free)}
	}
	if d.Plan != nil {
		if _, err := d.Plan.schedule(); err != nil {
			var ie *InvalidError
			if errors.As(err, &ie) {
				return &problem{ie.Field, ie.Reason}
			}
			return &problem{fPlan, err.Error()}
		}
	}
	return nil
}

func statusList() string {
	names := make([]string, len(knownStatuses))
	for i, s := range knownStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// describeType names a Go field type as the BSON value it needs.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Map:
		return "a document of " + strings.TrimPrefix(describeType(t.Elem()), "a ") + "s"
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.Struct:
		if t == reflect.TypeFor[bson.RawValue]() {
			return "any value"
		}
		if t.String() == "time.Time" {
			return "a date"
		}
		return "a document"
	}
	return t.String()
}

// describeValue shows a stored value briefly, for a message.
func describeValue(v bson.RawValue) string {
	s := v.String()
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%s %s", v.Type, s)
}
