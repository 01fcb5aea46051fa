package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// info is a task as the command reads it: params stay undecoded.
type info = mscheduler.TaskInfo[bson.RawValue]

// taskJSON is a task in --json output. Field names are those of the task
// document, so that scripts and mongosh speak of the same fields; slices
// are never null and durations are in milliseconds, as stored.
type taskJSON struct {
	Key             string            `json:"key"`
	Status          string            `json:"status"`
	Paused          bool              `json:"paused"`
	Priority        int               `json:"priority"`
	RunAt           time.Time         `json:"run_at"`
	Concurrency     int               `json:"concurrency"`
	DistinctWorkers bool              `json:"distinct_workers"`
	Free            int               `json:"free"`
	Running         int               `json:"running"`
	Succeeded       int               `json:"succeeded"`
	FailedRuns      int               `json:"failed_runs"`
	WorkerIDs       []string          `json:"worker_ids"`
	Group           string            `json:"group"`
	PingIntervalMS  int64             `json:"ping_interval_ms"`
	WorkerTimeoutMS int64             `json:"worker_timeout_ms"`
	MaxRetries      int               `json:"max_retries"`
	RetryDelayMS    int64             `json:"retry_delay_ms"`
	MaxFailedRuns   int               `json:"max_failed_runs"`
	TimeoutMS       int64             `json:"timeout_ms"` // 0: the consumer's timeout
	Description     string            `json:"description"`
	Source          string            `json:"source"`
	Tags            []string          `json:"tags"`
	Headers         map[string]string `json:"headers,omitempty"`
	Plan            *planJSON         `json:"plan"` // null for a task without a plan
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	Params          json.RawMessage   `json:"params"`
	// Problem says why the task cannot run as stored; empty for a sound one.
	Problem string       `json:"problem"`
	Invalid *invalidJSON `json:"invalid,omitempty"`
	// Runs are the kept runs, oldest first (show only).
	Runs []runJSON `json:"runs,omitempty"`
}

// invalidJSON is why and when a worker set a task invalid.
type invalidJSON struct {
	Reason   string    `json:"reason"`
	Field    string    `json:"field"`
	Found    string    `json:"found"`
	At       time.Time `json:"at"`
	WorkerID string    `json:"worker_id"`
	Was      string    `json:"was"`
	Run      *runJSON  `json:"run,omitempty"`
}

// runJSON is a finished run, with the field names of the task document.
type runJSON struct {
	Key        string          `json:"key,omitempty"` // in history
	RunID      string          `json:"run_id"`
	WorkerID   string          `json:"worker_id"`
	Outcome    string          `json:"outcome"`
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished"`
	LeaseUntil time.Time       `json:"lease_until"`
	Planned    time.Time       `json:"planned,omitzero"`
	Attempts   int             `json:"attempts"`
	Error      string          `json:"error,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
}

func newRunJSON(r *mscheduler.RunInfo) runJSON {
	out := runJSON{RunID: r.RunID, WorkerID: r.WorkerID, Outcome: string(r.Outcome), Started: r.Started.UTC(), Finished: r.Finished.UTC(),
		LeaseUntil: r.LeaseUntil.UTC(), Planned: r.Planned.UTC(), Attempts: r.Attempts, Error: r.Error}
	if r.Result.Type != 0 {
		out.Result = valueJSON(r.Result)
	}
	return out
}

func runsJSON(runs []mscheduler.RunInfo) []runJSON {
	out := make([]runJSON, len(runs))
	for i := range runs {
		out[i] = newRunJSON(&runs[i])
	}
	return out
}

// planJSON is a plan in --json output: its stored definition, a readable
// spec, and where it stands.
type planJSON struct {
	Kind     string    `json:"kind"`
	Spec     string    `json:"spec"`
	At       time.Time `json:"at,omitzero"`
	Every    int       `json:"every,omitempty"`
	Unit     string    `json:"unit,omitempty"`
	Weekday  *int      `json:"weekday,omitempty"` // 0 is Sunday, so a pointer
	Day      *int      `json:"day,omitempty"`     // 0 is the last day
	Time     string    `json:"time,omitempty"`
	Cron     string    `json:"cron,omitempty"`
	Zone     string    `json:"zone"`
	Repeat   int       `json:"repeat"`
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	Missed   string    `json:"missed"`
	Overrun  string    `json:"overrun,omitempty"`
	GraceMS  int64     `json:"grace_ms"`
	Planned  time.Time `json:"planned,omitzero"`
	Runs     int       `json:"runs"`
	Skipped  int       `json:"skipped"`
	SkipNext int       `json:"skip_next"`
	// Upcoming are the next planned times as the workers will run them.
	Upcoming []time.Time `json:"upcoming"`
	// MissedCount is how many of Skipped were missed rather than skipped
	// on request (missed is the policy).
	MissedCount int `json:"missed_count"`
}

func newTaskJSON(ti *info) *taskJSON {
	t := &ti.Task
	out := &taskJSON{
		Key: t.Key, Status: string(ti.Status), Paused: ti.Paused, Priority: t.Priority, RunAt: t.RunAt.UTC(),
		Concurrency: t.Concurrency, DistinctWorkers: t.DistinctWorkers,
		Free: ti.Free, Running: ti.Running, Succeeded: ti.Succeeded, FailedRuns: ti.FailedRuns,
		WorkerIDs: nonNil(t.WorkerIDs), Group: t.Group,
		PingIntervalMS: t.PingInterval.Milliseconds(), WorkerTimeoutMS: t.WorkerTimeout.Milliseconds(),
		MaxRetries: t.MaxRetries, RetryDelayMS: t.RetryDelay.Milliseconds(), MaxFailedRuns: t.MaxFailedRuns,
		TimeoutMS:   t.Timeout.Milliseconds(),
		Description: t.Description, Source: t.Source, Tags: nonNil(t.Tags), Headers: t.Headers,
		CreatedAt: ti.CreatedAt.UTC(), UpdatedAt: ti.UpdatedAt.UTC(),
		Params: valueJSON(t.Params), Problem: ti.Problem,
	}
	if t.Plan != nil {
		out.Plan = newPlanJSON(t.Plan, ti.Plan)
	}
	if inv := ti.Invalid; inv != nil {
		out.Invalid = &invalidJSON{Reason: inv.Reason, Field: inv.Field, Found: inv.Found, At: inv.At.UTC(), WorkerID: inv.WorkerID, Was: inv.Was}
		if inv.Run != nil {
			run := newRunJSON(inv.Run)
			out.Invalid.Run = &run
		}
	}
	return out
}

func newPlanJSON(p *mscheduler.Plan, st *mscheduler.PlanInfo) *planJSON {
	out := &planJSON{
		Kind: string(p.Kind), Spec: p.String(), At: p.At.UTC(), Every: p.Every, Unit: string(p.Unit), Cron: p.Cron,
		Zone: cmp.Or(p.Zone, "UTC"), Repeat: p.Repeat, Start: p.Start.UTC(), End: p.End.UTC(),
		Missed: string(cmp.Or(p.Missed, mscheduler.MissedSkip)), Overrun: string(p.Overrun),
		GraceMS: cmp.Or(p.Grace, mscheduler.GraceDefault).Milliseconds(),
	}
	switch p.Kind {
	case mscheduler.PlanWeekly:
		out.Weekday, out.Time = new(int(p.Weekday)), p.Time.String()
	case mscheduler.PlanMonthly:
		out.Day, out.Time = new(p.Day), p.Time.String()
	}
	out.Upcoming = []time.Time{}
	if st != nil {
		out.Planned, out.Runs, out.Skipped, out.MissedCount, out.SkipNext = st.Planned.UTC(), st.Runs, st.Skipped, st.Missed, st.SkipNext
		for _, u := range st.Upcoming {
			out.Upcoming = append(out.Upcoming, u.UTC())
		}
	}
	return out
}

// valueJSON renders a stored value as relaxed extended JSON: plain JSON for
// strings, numbers, documents and arrays, {"$date": ...} and the like for
// BSON's other types; a value that cannot be rendered, as a JSON string
// saying so.
func valueJSON(v bson.RawValue) json.RawMessage {
	if v.Type == 0 { // no such field
		return json.RawMessage("null")
	}
	// Extended JSON is defined for documents; wrap the value in one.
	doc, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	var wrapped struct {
		V json.RawMessage `json:"v"`
	}
	if err == nil {
		err = json.Unmarshal(doc, &wrapped)
	}
	if err != nil {
		msg, _ := json.Marshal(fmt.Sprintf("(cannot be shown: %v)", err))
		return msg
	}
	return wrapped.V
}

// timeText is a stored time for people: UTC, to the second; "-" when zero.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// statusText is the status with the paused marker.
func statusText(ti *info) string {
	if ti.Paused {
		return string(ti.Status) + " (paused)"
	}
	return string(ti.Status)
}

// nextRunText is when the task may run next. A task that is done has no
// next run, whatever run_at still says.
func nextRunText(ti *info) string {
	switch {
	case ti.Status == mscheduler.StatusSucceeded, ti.Status == mscheduler.StatusFailed, ti.Status == mscheduler.StatusFinished,
		ti.Status == mscheduler.StatusCancelled:
		return "-"
	case ti.Problem != "":
		return "never, until repaired"
	case ti.Plan != nil && ti.Plan.SkipNext > 0:
		// run_at is where the plan wakes to skip; people want the run after.
		if len(ti.Plan.Upcoming) == 0 {
			return "never, all skipped"
		}
		return timeText(ti.Plan.Upcoming[0])
	}
	return timeText(ti.Task.RunAt)
}

// cell makes text safe for one cell of a tabwriter table: a tab or newline
// in a description would break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
