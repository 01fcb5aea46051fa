package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
)

// opError is a failed operation, with a message for an operator and the
// library's error underneath.
type opError struct {
	msg string
	err error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.err }

// taskError describes err, returned by the operation verb on the task key.
// The library's messages name the package and repeat what failed; here the
// command names itself once, and says what was refused in its own words.
func taskError(verb, key string, err error) error {
	var invalid *mscheduler.InvalidError
	switch {
	case errors.Is(err, mscheduler.ErrNotFound):
		return &opError{msg: fmt.Sprintf("%s %q: task not found", verb, key), err: err}
	case errors.As(err, &invalid) && invalid.Field == "key":
		return &opError{msg: fmt.Sprintf("%s %q: %s", verb, key, invalid.Reason), err: err}
	case errors.As(err, &invalid) && flagOf(invalid.Field) != "":
		return usageErrorf("%s %q: %s: %s", verb, key, flagOf(invalid.Field), inFlagTerms(invalid.Reason))
	case errors.As(err, &invalid):
		return &opError{msg: fmt.Sprintf("%s %q: invalid %s: %s", verb, key, invalid.Field, invalid.Reason), err: err}
	}
	return libraryError(verb, err)
}

// libraryError drops the package name that leads the library's messages:
// the command prints its own. A refused value that a flag gave is a usage
// error, in the flag's name.
func libraryError(verb string, err error) error {
	var invalid *mscheduler.InvalidError
	if errors.As(err, &invalid) && flagOf(invalid.Field) != "" {
		return usageErrorf("%s: %s: %s", verb, flagOf(invalid.Field), inFlagTerms(invalid.Reason))
	}
	return &opError{msg: strings.TrimPrefix(err.Error(), "mscheduler: "), err: err}
}

// flagNames are the flags that set the library's fields, so that a refusal
// names what the operator typed rather than a Go field.
var flagNames = map[string]string{
	"Concurrency": "--concurrency", "Priority": "--priority", "PingInterval": "--ping-interval",
	"WorkerTimeout": "--worker-timeout", "MaxRetries": "--max-retries", "RetryDelay": "--retry-delay",
	"MaxFailedRuns": "--max-failed-runs", "Timeout": "--timeout", "WorkerIDs": "--worker-ids", "Group": "--group",
	"Description": "--description", "Source": "--source", "Tags": "--tags", "RunAt": "--run-at", "Params": "--params",
	"After": "--after", "Limit": "--limit", "n": "N",
	"Plan.Zone": "--zone", "Plan.Start": "--start", "Plan.End": "--end", "Plan.Repeat": "--repeat",
	"Plan.Missed": "--missed", "Plan.Overrun": "--overrun", "Plan.Grace": "--grace",
}

// flagOf is the flag that sets field, or "" if none does: the other
// fields of a plan come from --plan, and an item of a list is named by its
// place ("--tags value 2").
func flagOf(field string) string {
	name, index, indexed := strings.Cut(strings.TrimSuffix(field, "]"), "[")
	flag, ok := flagNames[name]
	switch {
	case !ok && strings.HasPrefix(name, "Plan."):
		flag = "--plan"
	case !ok:
		return ""
	}
	if i, err := strconv.Atoi(index); indexed && err == nil {
		flag += fmt.Sprintf(" value %d", i+1)
	}
	return flag
}

// inFlagTerms says a refusal's reason with the flags' values for the
// library's names.
var inFlagTerms = strings.NewReplacer(
	"NoRetries (-1)", "-1 (no retries)",
	"WorkerTimeout (", "--worker-timeout (",
	"is not a cursor this library gave", "is not a cursor this command printed",
).Replace

// unreachable says, on one line, that no server answered, when that is
// what err is: the driver's own message carries its whole topology.
func (c *cli) unreachable(err error) (string, bool) {
	var sel topology.ServerSelectionError
	if !errors.As(err, &sel) {
		return "", false
	}
	var at, why []string
	for _, s := range sel.Desc.Servers {
		at = append(at, s.Addr.String())
		if s.LastError != nil {
			why = append(why, s.LastError.Error())
		}
	}
	msg := fmt.Sprintf("no server answered at %s within --connect-timeout (%s)", strings.Join(at, ", "), c.connectTimeout)
	if len(why) > 0 {
		msg += ": " + strings.Join(why, "; ")
	}
	return msg + "; is it running, and are --uri or $" + worker.EnvURI + " right?", true
}
