package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// TaskInfo is a task as stored: its parameters and options, and where it
// stands. A document that cannot run as stored is still returned, with
// Problem saying why and the fields that could be read.
type TaskInfo[P any] struct {
	// Task holds the key, params, options, metadata and plan; Task.Run is nil.
	Task                                 Task[P]
	Status                               Status
	Paused                               bool
	Free, Running, Succeeded, FailedRuns int
	// Plan is where the task's plan stands; nil for a task without one.
	Plan                 *PlanInfo
	CreatedAt, UpdatedAt time.Time
	// Rev is raised by every write that changes the task's state (a claim,
	// a run end, an action, Update), not by a lease renewal; a publish
	// that replaces params or run_at moves UpdatedAt only. Together they
	// say whether the task changed since it was read: see [IfUnchanged].
	Rev int64
	// Problem names the field that keeps the task from running as stored,
	// and why: what a worker stored when it set the task invalid, or what
	// reading the document found now. Empty for a sound task.
	Problem string
	// Invalid is why and when a worker set the task to StatusInvalid.
	Invalid *InvalidInfo
	// Holders are the runs going on now, as of their last ping.
	Holders []HolderInfo
	// Runs are the task's most recent finished runs, oldest first (Get
	// only; List leaves them out).
	Runs []RunInfo
}

// LastRun is the task's most recent finished run, and false if it has
// none (a task never run, or read by List, which leaves runs out).
func (t *TaskInfo[P]) LastRun() (RunInfo, bool) {
	if len(t.Runs) == 0 {
		return RunInfo{}, false
	}
	return t.Runs[len(t.Runs)-1], true
}

// ResultAs decodes the result a run stored into R, the handler's result
// type: the typed side of [RunInfo.Result], as in
//
//	done, err := producer.Wait(ctx, key)
//	last, ok := done.LastRun()
//	receipt, err := mscheduler.ResultAs[Receipt](last)
//
// A run that stored no result (it failed, was cancelled, or its handler's
// R encodes to nothing) is an error naming the run and its outcome.
func ResultAs[R any](run RunInfo) (R, error) {
	var out R
	if run.Result.Type == 0 {
		return out, fmt.Errorf("mscheduler: run %s (%s) stored no result", run.RunID, run.Outcome)
	}
	if err := run.Result.Unmarshal(&out); err != nil {
		return out, fmt.Errorf("mscheduler: run %s: result as %T: %w", run.RunID, out, err)
	}
	return out, nil
}

// HolderInfo is a run going on: who holds it and until when.
type HolderInfo struct {
	WorkerID, RunID string
	Started         time.Time
	LeaseUntil      time.Time // renewed by each ping
	Attempt         int       // the local attempt, as of the last ping (0 before the first)
	// Lease, when set, is the lease the run was last claimed or renewed
	// by in place of the task's shorter WorkerTimeout: its worker's server
	// answered too slowly for that one (lease_ms on the holder). Each ping
	// decides it afresh.
	Lease time.Duration
}

// PlanInfo is where a task's plan stands.
type PlanInfo struct {
	Planned time.Time // the current occurrence
	// Runs counts the occurrences that ran. Skipped counts the planned
	// times used up without running, Missed included: Skipped - Missed
	// were skipped on request (SkipNext). SkipNext is how many coming
	// planned times are still to be skipped.
	Runs, Skipped, SkipNext int
	// Missed counts the skipped planned times that came and went without
	// a run: passed over by the missed-run policy (workers down, the
	// task paused, a late start) or by the overrun policy during a run.
	// It is stored as plan.missed_count; a task stored by a version
	// that did not count it starts from 0 (its earlier missed times are
	// in Skipped only).
	Missed int
	// Upcoming are the next planned times as the workers will run them,
	// from when the task was read, if each runs on time: the current
	// occurrence first, unless it is too late for the missed-run policy
	// (then the one that will run in its place). At most
	// [UpcomingDefault]; empty when the task runs no more: succeeded,
	// failed, finished, cancelled or invalid.
	Upcoming []time.Time
}

// UpcomingDefault is how many upcoming planned times PlanInfo lists.
const UpcomingDefault = 10

// InvalidInfo is why a worker set a task to StatusInvalid.
type InvalidInfo struct {
	Reason   string // names the field and what is wrong with it
	Field    string
	Found    string // when it showed: claim, run end, sweep, check or refused claim
	At       time.Time
	WorkerID string
	Was      string // the status before, as stored
	// Run is the run that was going, whose end could not be recorded as
	// usual; nil if none.
	Run *RunInfo
}

// RunInfo is one finished run of a task.
type RunInfo struct {
	Key               string // the task's (from Producer.Runs; empty in TaskInfo.Runs)
	RunID, WorkerID   string
	Outcome           Outcome
	Started, Finished time.Time
	LeaseUntil        time.Time
	Lease             time.Duration // the longest lease beyond the task's WorkerTimeout the run held, if it held one (lease_ms)
	Planned           time.Time     // for a task with a plan
	Attempts          int
	Error             string
	Result            bson.RawValue // as stored; decode it into the handler's R
	// Problem, from Producer.Runs, names the field of a history record
	// that cannot be read as stored (edited by hand into the wrong shape,
	// say outcome: 5 or finished: "yesterday") and why, in the words used
	// for tasks; the record is listed with the fields that could be read.
	// Empty for a sound record.
	Problem string
}

func newRunInfo(r runRecord) RunInfo {
	return RunInfo{
		RunID: r.RunID, WorkerID: r.WorkerID, Outcome: r.Outcome, Started: r.Started, Finished: r.Finished,
		LeaseUntil: r.LeaseUntil, Planned: stored.TimeOf(r.Planned), Attempts: r.Attempts, Error: r.Error, Result: r.Result,
		Lease: stored.FromMS(max(r.LeaseMS, 0)),
	}
}

// Get returns the task with the key, or [ErrNotFound].
func (p *Producer[P]) Get(ctx context.Context, key string) (*TaskInfo[P], error) {
	raw, err := p.coll.FindOne(ctx, bson.D{{Key: fID, Value: key}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: get %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: get %q: %w", key, err)
	}
	info := newTaskInfo[P](raw, p.clock.Now())
	info.Runs = readRuns(raw)
	return info, nil
}

// ListOpts selects tasks for List. Empty fields select everything.
type ListOpts struct {
	// Tags selects tasks that carry every one of these tags (served by the
	// tags index).
	Tags []string
	// Statuses selects tasks in any of these statuses.
	Statuses []Status
	// Paused selects only paused tasks.
	Paused bool
	// Group selects the tasks of this group (Task.Group).
	Group string
	// Groups selects the tasks of any of these groups, "" standing for the
	// tasks of no group. Nil selects every group.
	Groups []string
	// Recurring selects the tasks that have a plan. No index knows them:
	// the server reads the tasks in the Sort order until it has Limit of
	// them, so bound it with a deadline on ctx.
	Recurring bool
	// RunAtFrom and RunAtBefore select the tasks whose run_at (the next
	// run time; for a finished task, the time it was last due) is at or
	// after RunAtFrom and before RunAtBefore. A zero time leaves its side
	// open; with both set, RunAtBefore must be after RunAtFrom.
	RunAtFrom, RunAtBefore time.Time
	// Sort is the order: [SortByKey] (the zero value), [SortByRunAt] or
	// [SortByPriority] (the claim order).
	Sort ListSort
	// After selects the tasks that come after the task with this key in
	// the Sort order: the key of the last task of the previous page, to
	// read on from there. Under a sort other than by key, List reads that
	// task's run_at and priority now and continues from them; if the task
	// no longer exists it returns an error matching [ErrNotFound] (start
	// again from the first page). The list is live, not a snapshot: a
	// task whose run_at or priority changes between pages (it ran, was
	// rescheduled or reprioritized) may be listed twice or not at all.
	After string
	// KeyPrefix selects the tasks whose key starts with it (served by the
	// _id index).
	KeyPrefix string
	// Limit bounds the tasks returned. Defaults to [ListLimitDefault].
	Limit int
}

// ListLimitDefault is the default ListOpts.Limit.
const ListLimitDefault = 100

// List returns the tasks that opts selects, in the order of opts.Sort. A
// document that cannot be read whole is listed with its Problem. An unknown
// Sort, or a RunAtBefore not after RunAtFrom, is refused with an
// *InvalidError naming the field, before any query.
//
// Every filter is a plain query. With Statuses set, the claim index
// {status, priority -1, run_at} bounds a list by priority (its paging
// conditions included) and the due index {status, run_at} a list by
// run_at and the RunAt range; the key, which breaks ties, is in neither,
// so the server sorts the tasks that match, keeping the first Limit. No
// index is added for List: it serves operators and dashboards, not the
// workers, and each index costs every claim and run end a write.
func (p *Producer[P]) List(ctx context.Context, opts ListOpts) ([]TaskInfo[P], error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	filter := bson.D{}
	if len(opts.Tags) > 0 {
		filter = append(filter, bson.E{Key: fTags, Value: op("$all", opts.Tags)})
	}
	if len(opts.Statuses) > 0 {
		filter = append(filter, bson.E{Key: fStatus, Value: op("$in", opts.Statuses)})
	}
	if opts.Paused {
		filter = append(filter, bson.E{Key: fPaused, Value: true})
	}
	if opts.Group != "" {
		filter = append(filter, bson.E{Key: fGroup, Value: opts.Group})
	}
	if opts.Groups != nil {
		filter = append(filter, bson.E{Key: fGroup, Value: op("$in", groupValues(opts.Groups))})
	}
	if opts.Recurring {
		filter = append(filter, bson.E{Key: fPlan, Value: op("$type", "object")})
	}
	if r := runAtRange(opts.RunAtFrom, opts.RunAtBefore); len(r) > 0 {
		filter = append(filter, bson.E{Key: fRunAt, Value: r})
	}
	var byKey bson.D
	switch {
	case opts.After == "":
	case opts.Sort == SortByKey && opts.KeyPrefix == "":
		// Past the key in the order of _id values of every type: a copy of
		// a task made by hand may have an ObjectId _id, listed under it.
		var or bson.A
		for _, cond := range beyond(sortKey{field: fID}, keyValue(opts.After)) {
			or = append(or, bson.D{cond})
		}
		filter = append(filter, bson.E{Key: "$or", Value: or})
	case opts.Sort == SortByKey:
		byKey = append(byKey, bson.E{Key: "$gt", Value: opts.After})
	default:
		after, err := afterSortValues(ctx, p.coll, opts.Sort, opts.After)
		if err != nil {
			return nil, err
		}
		filter = append(filter, keysetFilter(opts.Sort.keys(), after))
	}
	if opts.KeyPrefix != "" {
		// An anchored, case-sensitive regex is served by the _id index.
		byKey = append(byKey, bson.E{Key: "$regex", Value: "^" + regexp.QuoteMeta(opts.KeyPrefix)})
	}
	if len(byKey) > 0 {
		filter = append(filter, bson.E{Key: fID, Value: byKey})
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	cur, err := findPage(ctx, p.coll, pageQuery{filter: filter, sort: opts.Sort.sort(), limit: int64(limit), projection: bson.D{{Key: fRuns, Value: 0}}})
	if err != nil {
		return nil, fmt.Errorf("mscheduler: list: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("mscheduler: list: %w", err)
	}
	out := make([]TaskInfo[P], 0, len(raws))
	for _, raw := range raws {
		out = append(out, *newTaskInfo[P](raw, p.clock.Now()))
	}
	return out, nil
}

// keyValue is the _id a key given as List's After names: the key itself,
// or, for a document whose _id is not a string, the value its key shows
// (extended JSON, as TaskInfo's key of such a document is written).
func keyValue(key string) bson.RawValue {
	if strings.HasPrefix(key, "{") {
		var v struct {
			V bson.RawValue `bson:"v"`
		}
		if err := bson.UnmarshalExtJSON([]byte(`{"v":`+key+`}`), true, &v); err == nil && v.V.Type != bson.TypeString {
			return v.V
		}
	}
	return taskstate.KeyID(key)
}

// newTaskInfo reads a stored task for Get and List. It never fails: a
// field that does not decode is left zero and named in Problem.
func newTaskInfo[P any](raw bson.Raw, now time.Time) *TaskInfo[P] {
	doc, prob := decodeLenient(raw)
	t, err := decodeTask[P](&doc)
	if err != nil && prob == nil {
		prob = &problem{Field: fParams, Reason: err.Error()}
	}
	info := &TaskInfo[P]{
		Task: *t, Status: doc.Status, Paused: doc.Paused,
		Free: doc.Free, Running: doc.Running, Succeeded: doc.Succeeded, FailedRuns: doc.FailedRuns,
		CreatedAt: doc.CreatedAt, UpdatedAt: doc.UpdatedAt, Rev: doc.Rev,
	}
	for w, h := range doc.Holders {
		info.Holders = append(info.Holders, HolderInfo{WorkerID: w, RunID: h.Run, Started: h.Started, LeaseUntil: h.LeaseUntil, Attempt: h.Attempt,
			Lease: taskstate.StretchedLease(h, stored.FromMS(doc.WorkerTimeoutMS))})
	}
	slices.SortFunc(info.Holders, func(a, b HolderInfo) int { return a.Started.Compare(b.Started) })
	if pl := doc.Plan; pl != nil {
		info.Plan = &PlanInfo{Planned: pl.Planned, Runs: pl.Runs, Skipped: pl.Skipped, SkipNext: pl.SkipNext, Missed: pl.MissedCount}
		if prob == nil {
			info.Plan.Upcoming = upcoming(&doc, now, UpcomingDefault)
		}
	}
	if n := doc.Invalid; n != nil {
		info.Invalid = &InvalidInfo{Reason: n.Reason, Field: n.Field, Found: n.Found, At: n.At, WorkerID: n.WorkerID}
		if s, ok := n.Was.StringValueOK(); ok {
			info.Invalid.Was = s
		} else if n.Was.Type != 0 {
			info.Invalid.Was = n.Was.String()
		}
		if n.Run != nil {
			run := newRunInfo(*n.Run)
			info.Invalid.Run = &run
		}
	}
	switch {
	case prob != nil:
		info.Problem = prob.Error()
	case doc.Status == StatusInvalid && doc.Invalid != nil:
		info.Problem = doc.Invalid.Reason
	}
	return info
}

// upcoming lists the next n planned times of a stored plan from now; none
// for a task that runs no more, whatever its plan still says: every view
// of a task (Get, List, and the pages and commands built on them) shows
// its upcoming times from here.
func upcoming(doc *taskDoc, now time.Time, n int) []time.Time {
	pl := doc.Plan
	s, err := scheduleOf(pl)
	if err != nil || done(doc.Status) {
		return nil
	}
	first := s.firstStart(pl, doc.Running, doc.Succeeded, doc.FailedRuns, now)
	return s.upcoming(first, PlanState{Runs: pl.Runs, Skipped: pl.Skipped}, n)
}

// decodeLenient decodes a stored task through the gate, leaving out the
// fields that do not decode; the problem names the first such field, or
// else what keeps the task from running.
func decodeLenient(raw bson.Raw) (taskDoc, *problem) {
	doc, prob := inspectTask(raw)
	return *doc, prob
}

// readRuns decodes a task's kept runs, skipping any record edited out of
// shape.
func readRuns(raw bson.Raw) []RunInfo {
	kept := stored.KeptRuns(raw)
	out := make([]RunInfo, 0, len(kept))
	for _, r := range kept {
		out = append(out, newRunInfo(r))
	}
	return out
}

// groupValues are the values of the group field that select groups: ""
// (no group) is the field's absence, which null matches in $in.
func groupValues(groups []string) bson.A {
	out := make(bson.A, 0, len(groups))
	for _, g := range groups {
		if g == "" {
			out = append(out, nil)
		} else {
			out = append(out, g)
		}
	}
	return out
}
