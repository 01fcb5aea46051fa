package mscheduler

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Task documents are edited by hand in mongosh and Compass, so a worker
// reads them as untrusted input, through the one gate (stored.DecodeTask):
// before it runs a task, and whenever a write about one is refused, it
// names the first field that is wrong.

// problem says what is wrong with a stored document, naming the field.
type problem = stored.Problem

// knownStatuses are every status the library writes.
var knownStatuses = stored.Statuses

// inspect returns the first problem of a stored task document, or nil:
// the gate's, and for a task that may still run, a plan that does not
// compile. It never panics, whatever the document holds.
func inspect(raw bson.Raw) *problem {
	_, prob := inspectTask(raw)
	return prob
}

// inspectTask is inspect returning the task as decoded too.
func inspectTask(raw bson.Raw) (*taskDoc, *problem) {
	t, prob := stored.DecodeTask(raw)
	if prob != nil || !t.Status.Claimable() || t.Plan == nil {
		return t, prob
	}
	return t, planProblem(t.Plan)
}

// planProblem is what keeps a stored plan from compiling, named by its
// stored field.
func planProblem(pl *planDoc) *problem {
	if _, err := scheduleOf(pl); err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			return &problem{Field: ie.Field, Reason: ie.Reason}
		}
		return &problem{Field: fPlan, Reason: err.Error()}
	}
	return nil
}
