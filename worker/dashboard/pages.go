package dashboard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Page sizes: every list is bounded.
const (
	listLimitDefault = 50
	listLimitMax     = 500
	historyPage      = 25
	workerRuns       = 40
	chartRuns        = mscheduler.RunsLimitMax
)

// statuses are the ones a filter may name.
var statuses = []mscheduler.Status{
	mscheduler.StatusPending, mscheduler.StatusRunning, mscheduler.StatusSucceeded, mscheduler.StatusFailed,
	mscheduler.StatusFinished, mscheduler.StatusCancelled, mscheduler.StatusInvalid, "paused",
}

// collectionOf returns the collection a page is about: the c parameter,
// or the first collection.
func (d *Dashboard) collectionOf(ctx context.Context, r *http.Request) (string, []string, error) {
	names, err := d.collections(ctx)
	if err != nil {
		return "", nil, err
	}
	c := r.URL.Query().Get("c")
	if c == "" && len(names) > 0 {
		c = names[0]
	}
	return c, names, nil
}

// pageScope is what a page about one collection starts from.
type pageScope struct {
	c     string   // the collection
	names []string // every collection shown
	p     *mscheduler.Producer[bson.RawValue]
}

// scope reads the collection a page is about and its producer. On an
// error it has answered the request, and returns nil.
func (d *Dashboard) scope(ctx context.Context, w http.ResponseWriter, r *http.Request) *pageScope {
	c, names, err := d.collectionOf(ctx, r)
	if err == nil {
		var p *mscheduler.Producer[bson.RawValue]
		if p, err = d.producer(ctx, c); err == nil {
			return &pageScope{c: c, names: names, p: p}
		}
	}
	d.serverError(w, r, err)
	return nil
}

// serverError shows an error of the server or the library.
func (d *Dashboard) serverError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errUnknownCollection):
		d.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, mscheduler.ErrNotTaskCollection):
		d.fail(w, r, http.StatusNotFound, strings.TrimPrefix(err.Error(), "mscheduler: "))
	case errors.Is(err, mscheduler.ErrNotFound):
		d.fail(w, r, http.StatusNotFound, fmt.Sprintf("No task has the key %q.", r.URL.Query().Get("key")))
	case errors.Is(err, mscheduler.ErrInvalid):
		// A parameter of the address the library refused (a cursor edited
		// by hand): the request's fault, not the server's.
		d.fail(w, r, http.StatusBadRequest, "Bad request: "+strings.TrimPrefix(err.Error(), "mscheduler: ")+".")
	case errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err):
		d.fail(w, r, http.StatusServiceUnavailable, "The query took longer than "+d.cfg.QueryTimeout.String()+" and was stopped: narrow the filter.")
	default:
		// The driver's error names hosts and the topology: the log has it,
		// the page (which anyone who can read the dashboard sees) does not.
		d.cfg.Logger.Error("dashboard", "path", r.URL.Path, "error", err)
		d.fail(w, r, http.StatusBadGateway, "The server could not answer; the dashboard's log has the error.")
	}
}

type collectionSummary struct {
	Name   string
	Err    string
	Counts []statusCount
	Stats  *mscheduler.Stats
	Hours  []chartBucket
	Peak   int // the most runs in one bucket: the chart's scale
	Cut    int
}

type statusCount struct {
	Status mscheduler.Status
	N      int64
}

type chartBucket struct {
	Label        string
	Runs, Failed int
	Pct, FailPct int
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.queryContext(r)
	defer cancel()
	c, names, err := d.collectionOf(ctx, r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	data := struct {
		Collections []collectionSummary
		Live, Stale int
	}{}
	for _, name := range names {
		data.Collections = append(data.Collections, d.summarize(ctx, name))
	}
	workers, err := mscheduler.ListWorkers(ctx, d.db)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	for _, wk := range workers {
		if wk.Stale {
			data.Stale++
		} else {
			data.Live++
		}
	}
	d.render(w, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Collections: names, Collection: c, Data: data})
}

// summarize gathers one collection's counts and last hour.
func (d *Dashboard) summarize(ctx context.Context, name string) collectionSummary {
	s := collectionSummary{Name: name}
	p, err := d.producer(ctx, name)
	if err == nil {
		s.Stats, err = p.Stats(ctx)
	}
	if err != nil {
		s.Err = err.Error()
		return s
	}
	for _, st := range statuses[:len(statuses)-1] {
		s.Counts = append(s.Counts, statusCount{st, s.Stats.ByStatus[st]})
	}
	page, err := p.Runs(ctx, mscheduler.RunFilter{Since: s.Stats.At.Add(-time.Hour), Limit: chartRuns})
	if err != nil {
		s.Err = err.Error()
		return s
	}
	if page.Next != "" {
		s.Cut = len(page.Runs)
	}
	s.Hours, s.Peak = chart(page.Runs, s.Stats.At)
	return s
}

// chart counts runs per 5 minutes over the hour before now, and returns
// the most in one bucket, which the bars are scaled to.
func chart(runs []mscheduler.RunInfo, now time.Time) ([]chartBucket, int) {
	const n = 12
	b := make([]chartBucket, n)
	start := now.Add(-time.Hour)
	for i := range b {
		b[i].Label = start.Add(time.Duration(i) * 5 * time.Minute).UTC().Format("15:04")
	}
	for _, r := range runs {
		i := int(r.Finished.Sub(start) / (5 * time.Minute))
		if i < 0 || i >= n {
			continue
		}
		b[i].Runs++
		if r.Outcome == mscheduler.OutcomeFailed || r.Outcome == mscheduler.OutcomeExpired {
			b[i].Failed++
		}
	}
	most := 1
	for _, x := range b {
		most = max(most, x.Runs)
	}
	for i := range b {
		b[i].Pct = b[i].Runs * 100 / most
		if b[i].Runs > 0 {
			b[i].FailPct = b[i].Failed * 100 / b[i].Runs
		}
	}
	return b, most
}

// taskRow is a task as the list and detail pages show it.
type taskRow struct {
	Key, Description, Source, Group, Problem string
	Headers                                  string // k=v, sorted by key
	Status                                   mscheduler.Status
	Paused                                   bool
	Running, Free, Succeeded, Concurrency    int
	Failed, MaxFailed, Priority              int
	NextRun                                  time.Time
	NextRunText                              string
	Holders, Tags, WorkerIDs                 []string
	PingInterval, WorkerTimeout              time.Duration
	Created, Updated                         time.Time
	Rev                                      int64
}

func newTaskRow(ti *mscheduler.TaskInfo[bson.RawValue]) taskRow {
	t := ti.Task
	row := taskRow{
		Key: t.Key, Description: t.Description, Source: t.Source, Group: t.Group, Problem: ti.Problem,
		Status: ti.Status, Paused: ti.Paused, Running: ti.Running, Free: ti.Free, Succeeded: ti.Succeeded,
		Concurrency: t.Concurrency, Failed: ti.FailedRuns, MaxFailed: t.MaxFailedRuns, Priority: t.Priority,
		Tags: t.Tags, WorkerIDs: t.WorkerIDs, PingInterval: t.PingInterval, WorkerTimeout: t.WorkerTimeout,
		Created: ti.CreatedAt, Updated: ti.UpdatedAt, Rev: ti.Rev, Headers: headersText(t.Headers),
	}
	for _, h := range ti.Holders {
		row.Holders = append(row.Holders, h.WorkerID)
	}
	switch {
	case slices.Contains([]mscheduler.Status{mscheduler.StatusSucceeded, mscheduler.StatusFailed, mscheduler.StatusFinished, mscheduler.StatusCancelled}, ti.Status):
		row.NextRunText = "-"
	case ti.Problem != "":
		row.NextRunText = "never, until repaired"
	case ti.Free == 0 && ti.Running > 0:
		row.NextRunText = "every slot is running"
	case ti.Plan != nil && ti.Plan.SkipNext > 0 && len(ti.Plan.Upcoming) > 0:
		row.NextRun = ti.Plan.Upcoming[0]
	default:
		row.NextRun = t.RunAt
	}
	return row
}

// listFilter is the task list's filter, read from the URL.
type listFilter struct {
	Status   string
	Prefix   string
	Tag      string
	Worker   string
	Group    string
	From     string // run_at at or after, UTC, as the form sends it
	Before   string // run_at before
	Sort     string
	Limit    int
	After    string
	Statuses []mscheduler.Status
	Sorts    []sortChoice
	Tasks    []taskRow
	NextPage string

	from, before time.Time
}

// sortChoice is an order the list can take.
type sortChoice struct {
	Value, Label string
}

var sortChoices = []sortChoice{
	{string(mscheduler.SortByKey), "key, character by character (job-100 before job-11)"},
	{string(mscheduler.SortByRunAt), "next run, earliest first"},
	{string(mscheduler.SortByPriority), "claim order (priority, then next run)"},
}

// formTimes are the layouts a time filter accepts: the browser's
// datetime-local field (read as UTC), with or without seconds, and RFC 3339.
var formTimes = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseFormTime(field, s string) (time.Time, error) {
	for _, layout := range formTimes {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time: write it as 2026-11-23T14:00 (UTC) or in RFC 3339", field, s)
}

// readListFilter reads the filter, naming a bad value.
func readListFilter(q url.Values) (*listFilter, error) {
	f := &listFilter{Status: q.Get("status"), Prefix: q.Get("prefix"), Tag: q.Get("tag"), Worker: q.Get("worker"),
		Group: q.Get("group"), From: q.Get("from"), Before: q.Get("before"), Sort: q.Get("sort"), After: q.Get("after"),
		Limit: listLimitDefault, Statuses: statuses, Sorts: sortChoices}
	if f.Status != "" && !slices.Contains(statuses, mscheduler.Status(f.Status)) {
		return nil, fmt.Errorf("status %q is not one of %v", f.Status, statuses)
	}
	if !slices.ContainsFunc(sortChoices, func(c sortChoice) bool { return c.Value == f.Sort }) {
		return nil, fmt.Errorf("sort %q is not one of \"\" (key), %q or %q", f.Sort, mscheduler.SortByRunAt, mscheduler.SortByPriority)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > listLimitMax {
			return nil, fmt.Errorf("limit %q must be a whole number from 1 to %d", s, listLimitMax)
		}
		f.Limit = n
	}
	var err error
	if f.From != "" {
		if f.from, err = parseFormTime("from", f.From); err != nil {
			return nil, err
		}
	}
	if f.Before != "" {
		if f.before, err = parseFormTime("before", f.Before); err != nil {
			return nil, err
		}
	}
	if !f.from.IsZero() && !f.before.IsZero() && !f.before.After(f.from) {
		return nil, fmt.Errorf("before %q must be later than from %q", f.Before, f.From)
	}
	return f, nil
}

func (f *listFilter) opts() mscheduler.ListOpts {
	o := mscheduler.ListOpts{After: f.After, KeyPrefix: f.Prefix, Limit: f.Limit + 1, Group: f.Group,
		RunAtFrom: f.from, RunAtBefore: f.before, Sort: mscheduler.ListSort(f.Sort)}
	switch {
	case f.Status == "paused":
		o.Paused = true
	case f.Status != "":
		o.Statuses = []mscheduler.Status{mscheduler.Status(f.Status)}
	}
	if f.Worker != "" {
		// Only running tasks have holders: the claim index serves it.
		o.Statuses = []mscheduler.Status{mscheduler.StatusRunning}
	}
	if f.Tag != "" {
		o.Tags = []string{f.Tag}
	}
	return o
}

func (d *Dashboard) tasks(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.queryContext(r)
	defer cancel()
	sc := d.scope(ctx, w, r)
	if sc == nil {
		return
	}
	c, names := sc.c, sc.names
	f, err := readListFilter(r.URL.Query())
	if err != nil {
		d.render(w, http.StatusBadRequest, "tasks", view{Title: "Tasks", Nav: "tasks", Collections: names, Collection: c,
			Message: "Bad filter: " + err.Error(), Bad: true, Data: &listFilter{Statuses: statuses, Sorts: sortChoices, Limit: listLimitDefault}})
		return
	}
	list, err := sc.p.List(ctx, f.opts())
	var invalid *mscheduler.InvalidError
	switch {
	case errors.As(err, &invalid):
		d.render(w, http.StatusBadRequest, "tasks", view{Title: "Tasks", Nav: "tasks", Collections: names, Collection: c,
			Message: "Bad filter: " + err.Error(), Bad: true, Data: f})
		return
	case errors.Is(err, mscheduler.ErrNotFound) && f.After != "":
		// Under a sort other than by key, the next page starts from the
		// last task shown, which is gone.
		d.render(w, http.StatusNotFound, "tasks", view{Title: "Tasks", Nav: "tasks", Collections: names, Collection: c,
			Message: fmt.Sprintf("The task this page went on from (%q) is gone: start again from the first page.", f.After), Bad: true, Data: f})
		return
	case err != nil:
		d.serverError(w, r, err)
		return
	}
	more := len(list) > f.Limit
	list = list[:min(len(list), f.Limit)]
	for i := range list {
		row := newTaskRow(&list[i])
		if f.Worker != "" && !slices.Contains(row.Holders, f.Worker) {
			continue
		}
		f.Tasks = append(f.Tasks, row)
	}
	if more && len(list) > 0 {
		q := r.URL.Query()
		q.Set("after", list[len(list)-1].Task.Key)
		f.NextPage = "tasks?" + q.Encode()
	}
	d.render(w, http.StatusOK, "tasks", view{Title: "Tasks", Nav: "tasks", Collections: names, Collection: c,
		Message: doneMessage(r.URL.Query().Get("done")), Data: f})
}

// headersText lists a task's headers as k=v, sorted by key.
func headersText(h map[string]string) string {
	parts := make([]string, 0, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, k+"="+h[k])
	}
	return strings.Join(parts, ", ")
}
