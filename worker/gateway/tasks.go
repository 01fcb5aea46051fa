package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// taskIn is a task to publish. Options left out take the collection's
// defaults, as in the library: max_retries 0 is the default (2), -1 none.
type taskIn struct {
	Key             string            `json:"key"`
	Params          json.RawMessage   `json:"params,omitempty"`
	Priority        int               `json:"priority,omitempty"`
	RunAt           *time.Time        `json:"run_at,omitempty"`
	Concurrency     int               `json:"concurrency,omitempty"`
	DistinctWorkers bool              `json:"distinct_workers,omitempty"`
	Group           string            `json:"group,omitempty"`
	WorkerIDs       []string          `json:"worker_ids,omitempty"`
	PingIntervalMS  int64             `json:"ping_interval_ms,omitempty"`
	WorkerTimeoutMS int64             `json:"worker_timeout_ms,omitempty"`
	MaxRetries      int               `json:"max_retries,omitempty"`
	RetryDelayMS    int64             `json:"retry_delay_ms,omitempty"`
	MaxFailedRuns   int               `json:"max_failed_runs,omitempty"`
	TimeoutMS       int64             `json:"timeout_ms,omitempty"`
	Description     string            `json:"description,omitempty"`
	Source          string            `json:"source,omitempty"`
	Tags            []string          `json:"tags,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
}

// publishIn is one task, or many under "tasks".
type publishIn struct {
	taskIn
	Tasks []taskIn `json:"tasks,omitempty"`
}

func (t *taskIn) task(field string) (mscheduler.Task[bson.RawValue], *apiError) {
	for _, d := range []struct {
		name string
		ms   int64
	}{{"ping_interval_ms", t.PingIntervalMS}, {"worker_timeout_ms", t.WorkerTimeoutMS}, {"retry_delay_ms", t.RetryDelayMS}, {"timeout_ms", t.TimeoutMS}} {
		if d.ms < 0 || d.ms > MaxDurationMS {
			return mscheduler.Task[bson.RawValue]{}, &apiError{http.StatusBadRequest, field + d.name, fmt.Sprintf("must be from 0 to %d (a year), got %d", MaxDurationMS, d.ms), nil}
		}
	}
	out := mscheduler.Task[bson.RawValue]{
		Key: t.Key, Priority: t.Priority, Concurrency: t.Concurrency, DistinctWorkers: t.DistinctWorkers, Group: t.Group, WorkerIDs: t.WorkerIDs,
		PingInterval: ms(t.PingIntervalMS), WorkerTimeout: ms(t.WorkerTimeoutMS), MaxRetries: t.MaxRetries,
		RetryDelay: ms(t.RetryDelayMS), MaxFailedRuns: t.MaxFailedRuns, Timeout: ms(t.TimeoutMS),
		Description: t.Description, Source: t.Source, Tags: t.Tags, Headers: t.Headers,
	}
	if t.RunAt != nil {
		out.RunAt = *t.RunAt
	}
	out.Params = bson.RawValue{Type: bson.TypeNull} // no params: stored as null, as the command does
	if len(t.Params) > 0 {
		v, err := fromJSON(t.Params)
		if err != nil {
			return out, &apiError{http.StatusBadRequest, field + "params", err.Error(), nil}
		}
		out.Params = v
	}
	return out, nil
}

// MaxDurationMS bounds every duration of a request, in milliseconds: a
// year. Counts of milliseconds beyond what a time.Duration holds wrapped
// around (18446744073711 was stored as 1 ms), and no lease, retry delay
// or deadline of a task needs more.
const MaxDurationMS = 365 * 24 * 3600 * 1000

// ms is a duration of a request, bounded before (see MaxDurationMS).
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// fromJSON turns a JSON value into BSON, reading extended JSON ($date,
// $oid, ...) where it is used.
func fromJSON(raw json.RawMessage) (bson.RawValue, error) {
	var wrapped struct {
		V bson.RawValue `bson:"v"`
	}
	if err := bson.UnmarshalExtJSON([]byte(`{"v":`+string(raw)+`}`), false, &wrapped); err != nil {
		return bson.RawValue{}, fmt.Errorf("is not a JSON value the gateway can store: %v", err)
	}
	return wrapped.V, nil
}

// toJSON turns a BSON value into relaxed extended JSON; null when unset.
func toJSON(v bson.RawValue) json.RawMessage {
	if v.Type == 0 {
		return json.RawMessage("null")
	}
	doc, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return json.RawMessage(strconv.Quote(v.String()))
	}
	var wrapped struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(doc, &wrapped) != nil {
		return json.RawMessage("null")
	}
	return wrapped.V
}

func (g *Gateway) publish(w http.ResponseWriter, r *http.Request, c caller) error {
	var in publishIn
	if err := decode(r, &in); err != nil {
		return err
	}
	prod, aerr := g.producer(r.Context(), r.PathValue("collection"))
	if aerr != nil {
		return aerr
	}
	many := in.Tasks != nil
	if many && !reflect.ValueOf(in.taskIn).IsZero() {
		return &apiError{http.StatusBadRequest, "tasks", "send one task or tasks, not both: with tasks, every option goes in each task", nil}
	}
	ins := in.Tasks
	if !many {
		ins = []taskIn{in.taskIn}
	}
	tasks := make([]mscheduler.Task[bson.RawValue], len(ins))
	for i := range ins {
		prefix := ""
		if many {
			prefix = fmt.Sprintf("tasks[%d].", i)
		}
		t, err := ins[i].task(prefix)
		if err != nil {
			return err
		}
		if !inScope(c.scope(), t.Group) {
			return &apiError{http.StatusForbidden, prefix + "group", fmt.Sprintf("the token's groups do not include %q: publish tasks of its groups, or of none", t.Group), nil}
		}
		tasks[i] = t
	}
	var results []mscheduler.PublishResult
	var err error
	if many {
		results, err = prod.PublishMany(r.Context(), tasks, nil)
	} else {
		var res mscheduler.PublishResult
		res, err = prod.Publish(r.Context(), tasks[0], nil)
		results = []mscheduler.PublishResult{res}
	}
	if err != nil {
		if aerr := invalidError(err, ""); aerr != nil {
			return aerr
		}
		return serverError(err)
	}
	out := make([]publishOut, len(results))
	for i, res := range results {
		out[i] = publishOut{Key: res.Key, Outcome: string(res.Outcome)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": out})
	return nil
}

type publishOut struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
}

// goField matches the Go field names of the library's errors.
var goField = regexp.MustCompile(`[A-Z][A-Za-z]*`)

// jsonFieldOf turns a library field path (tasks[0].RunAt) into the
// request's (tasks[0].run_at).
func jsonFieldOf(field string) string {
	if name, rest, ok := strings.Cut(field, "["); ok { // a map key or index stays as it is
		index, after, _ := strings.Cut(rest, "]")
		return jsonFieldOf(name) + "[" + index + "]" + jsonFieldOf(after)
	}
	return goField.ReplaceAllStringFunc(field, func(name string) string {
		switch name {
		case "PingInterval", "WorkerTimeout", "RetryDelay", "Timeout":
			return snake(name) + "_ms"
		}
		return snake(name)
	})
}

// taskOptionNames are the task options a library message may name.
var taskOptionNames = regexp.MustCompile(`\b(PingInterval|WorkerTimeout|RetryDelay|MaxRetries|MaxFailedRuns|Concurrency|NoRetries|MaxParamsBytes|MaxHeadersBytes|MaxKeyBytes)\b`)

// jsonNamesIn writes a library message's option names as the request's.
func jsonNamesIn(reason string) string {
	return taskOptionNames.ReplaceAllStringFunc(reason, func(name string) string {
		switch name {
		case "NoRetries":
			return "-1"
		case "MaxParamsBytes", "MaxHeadersBytes", "MaxKeyBytes":
			return "the limit"
		}
		return jsonFieldOf(name)
	})
}

func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return strings.ReplaceAll(b.String(), "i_ds", "ids")
}

// taskOut is a task as the gateway shows it: the fields of the task
// document that say where it stands.
type taskOut struct {
	Key         string            `json:"key"`
	Status      string            `json:"status"`
	Paused      bool              `json:"paused"`
	Priority    int               `json:"priority"`
	RunAt       time.Time         `json:"run_at"`
	Group       string            `json:"group,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Description string            `json:"description,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Params      json.RawMessage   `json:"params"`
	Running     int               `json:"running"`
	Succeeded   int               `json:"succeeded"`
	FailedRuns  int               `json:"failed_runs"`
	Problem     string            `json:"problem,omitempty"`
	Runs        []runOutcome      `json:"runs,omitempty"`
}

// runOutcome is a finished run of a task.
type runOutcome struct {
	RunID    string          `json:"run_id"`
	WorkerID string          `json:"worker_id"`
	Outcome  string          `json:"outcome"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Attempts int             `json:"attempts"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

func newTaskOut(ti *mscheduler.TaskInfo[bson.RawValue]) taskOut {
	t := ti.Task
	out := taskOut{
		Key: t.Key, Status: string(ti.Status), Paused: ti.Paused, Priority: t.Priority, RunAt: t.RunAt.UTC(),
		Group: t.Group, Tags: t.Tags, Description: t.Description, Headers: t.Headers, Params: toJSON(t.Params),
		Running: ti.Running, Succeeded: ti.Succeeded, FailedRuns: ti.FailedRuns, Problem: ti.Problem,
	}
	for _, run := range ti.Runs {
		ro := runOutcome{RunID: run.RunID, WorkerID: run.WorkerID, Outcome: string(run.Outcome), Started: run.Started.UTC(),
			Finished: run.Finished.UTC(), Attempts: run.Attempts, Error: run.Error}
		if run.Result.Type != 0 {
			ro.Result = toJSON(run.Result)
		}
		out.Runs = append(out.Runs, ro)
	}
	return out
}

func (g *Gateway) get(w http.ResponseWriter, r *http.Request, c caller) error {
	prod, aerr := g.producer(r.Context(), r.PathValue("collection"))
	if aerr != nil {
		return aerr
	}
	ti, err := prod.Get(r.Context(), r.PathValue("key"))
	if err == nil && !inScope(c.scope(), ti.Task.Group) {
		err = mscheduler.ErrNotFound // another group's: not there, for this token
	}
	if errors.Is(err, mscheduler.ErrNotFound) {
		return &apiError{http.StatusNotFound, "key", fmt.Sprintf("no task has the key %q", r.PathValue("key")), nil}
	}
	if err != nil {
		return serverError(err)
	}
	writeJSON(w, http.StatusOK, newTaskOut(ti))
	return nil
}

// statuses are the task statuses a list may ask for.
var statuses = []mscheduler.Status{
	mscheduler.StatusPending, mscheduler.StatusRunning, mscheduler.StatusSucceeded,
	mscheduler.StatusFailed, mscheduler.StatusFinished, mscheduler.StatusCancelled, mscheduler.StatusInvalid,
}

// listLimitMax bounds a list page.
const listLimitMax = 1000

func (g *Gateway) list(w http.ResponseWriter, r *http.Request, c caller) error {
	prod, aerr := g.producer(r.Context(), r.PathValue("collection"))
	if aerr != nil {
		return aerr
	}
	q := r.URL.Query()
	opts := mscheduler.ListOpts{Group: q.Get("group"), After: q.Get("after"), Tags: q["tag"]}
	if scope := c.scope(); scope != nil {
		switch {
		case opts.Group == "":
			opts.Groups = scope
		case !inScope(scope, opts.Group):
			return &apiError{http.StatusForbidden, "group", fmt.Sprintf("the token's groups do not include %q", opts.Group), nil}
		}
	}
	for _, s := range q["status"] {
		st := mscheduler.Status(s)
		if !slices.Contains(statuses, st) {
			return &apiError{http.StatusBadRequest, "status", fmt.Sprintf("%q is not a task status", s), nil}
		}
		opts.Statuses = append(opts.Statuses, st)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > listLimitMax {
			return &apiError{http.StatusBadRequest, "limit", fmt.Sprintf("must be a whole number from 1 to %d, got %q", listLimitMax, l), nil}
		}
		opts.Limit = n
	}
	tasks, err := prod.List(r.Context(), opts)
	if err != nil {
		if aerr := invalidError(err, ""); aerr != nil {
			return aerr
		}
		return serverError(err)
	}
	out := make([]taskOut, len(tasks))
	for i := range tasks {
		out[i] = newTaskOut(&tasks[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
	return nil
}

func (g *Gateway) cancel(w http.ResponseWriter, r *http.Request, c caller) error {
	prod, aerr := g.producer(r.Context(), r.PathValue("collection"))
	if aerr != nil {
		return aerr
	}
	err := cancelInScope(r.Context(), prod, r.PathValue("key"), c.scope())
	switch {
	case errors.Is(err, mscheduler.ErrNotFound):
		return &apiError{http.StatusNotFound, "key", fmt.Sprintf("no task has the key %q", r.PathValue("key")), nil}
	case errors.Is(err, mscheduler.ErrNotApplicable):
		return &apiError{http.StatusConflict, "key", err.Error(), nil}
	case err != nil:
		return serverError(err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"key": r.PathValue("key"), "status": "cancelled"})
	return nil
}

// inScope says a task of group is seen by a caller of scope (see
// caller.scope).
func inScope(scope []string, group string) bool { return scope == nil || slices.Contains(scope, group) }

// cancelInScope cancels a task of the scope: the cancel is fenced on the
// task as read (its rev), so that a task moved to another group meanwhile
// is not cancelled for a token that may not see it. A fence missed
// because the task changed (claimed, ended) reads it again, up to three
// times. Without a scope, it cancels as the library does.
func cancelInScope(ctx context.Context, prod *mscheduler.Producer[bson.RawValue], key string, scope []string) error {
	if scope == nil {
		return prod.Cancel(ctx, key)
	}
	for try := 1; ; try++ {
		ti, err := prod.Get(ctx, key)
		if err != nil {
			return err
		}
		if !inScope(scope, ti.Task.Group) {
			return mscheduler.ErrNotFound
		}
		err = prod.Cancel(ctx, key, mscheduler.IfUnchanged(ti.Rev, ti.UpdatedAt))
		if !errors.Is(err, mscheduler.ErrNotApplicable) || try == 3 {
			return err
		}
		if now, gerr := prod.Get(ctx, key); gerr != nil || now.Rev == ti.Rev && now.UpdatedAt.Equal(ti.UpdatedAt) {
			return err // not applicable to the task as it is: no change to wait out
		}
	}
}
