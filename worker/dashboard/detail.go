package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// taskDetail is the task page's data.
type taskDetail struct {
	taskRow
	Seen   string // the state the page showed, sent back with actions
	Params string // as shown: cut at maxShownParams
	// ParamsCut, when set, is the size of params too large to show whole
	// or to edit here: the page would carry them, twice, at each view.
	ParamsCut   string
	Invalid     *mscheduler.InvalidInfo
	HoldersInfo []mscheduler.HolderInfo
	Plan        *planView
	Actions     []actionButton
	History     []mscheduler.RunInfo
	MoreHistory string
}

// maxShownParams bounds the params a task page carries: larger ones are
// cut for reading, and not offered for editing in the page.
const maxShownParams = 64 << 10

// shownParams is params as the page shows them, and, when they are cut,
// their whole size in words.
func shownParams(v bson.RawValue) (text, cut string) {
	if len(v.Value) <= maxShownParams {
		return prettyJSON(v), ""
	}
	text = prettyJSON(v)
	if len(text) > maxShownParams {
		text = strings.ToValidUTF8(text[:maxShownParams], "") + "\n…"
	}
	return text, fmt.Sprintf("%d KiB", (len(v.Value)+1023)/1024)
}

type planView struct {
	Spec, Repeat, Missed, Overrun, Zone  string
	Runs, Skipped, MissedCount, SkipNext int
	Upcoming                             []time.Time
}

type actionButton struct {
	Name, Label, Confirm string
	Danger               bool
}

func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.queryContext(r)
	defer cancel()
	sc := d.scope(ctx, w, r)
	if sc == nil {
		return
	}
	c, names, p := sc.c, sc.names, sc.p
	key := r.URL.Query().Get("key")
	if key == "" {
		d.fail(w, r, http.StatusBadRequest, "Name a task: the key parameter is empty.")
		return
	}
	ti, err := p.Get(ctx, key)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	page, err := p.Runs(ctx, mscheduler.RunFilter{Key: key, Limit: historyPage, After: r.URL.Query().Get("runs_after")})
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	row := newTaskRow(ti)
	t := &taskDetail{taskRow: row, Seen: stateOf(row.Status, row.Paused),
		Invalid: ti.Invalid, HoldersInfo: ti.Holders, Actions: actionsFor(row), History: page.Runs}
	t.Params, t.ParamsCut = shownParams(ti.Task.Params)
	if page.Next != "" {
		q := url.Values{"c": {c}, "key": {key}, "runs_after": {page.Next}}
		t.MoreHistory = "task?" + q.Encode()
	}
	if pl := ti.Task.Plan; pl != nil {
		t.Plan = &planView{Spec: pl.String(), Repeat: pl.RepeatString(), Missed: string(cmp.Or(pl.Missed, mscheduler.MissedSkip)),
			Overrun: cmp.Or(string(pl.Overrun), "as missed"), Zone: cmp.Or(pl.Zone, "UTC")}
		if st := ti.Plan; st != nil {
			t.Plan.Runs, t.Plan.Skipped, t.Plan.MissedCount, t.Plan.SkipNext, t.Plan.Upcoming = st.Runs, st.Skipped, st.Missed, st.SkipNext, st.Upcoming
		}
	}
	d.render(w, http.StatusOK, "task", view{Title: key, Nav: "tasks", Collections: names, Collection: c,
		Message: doneMessage(r.URL.Query().Get("done")), Data: t})
}

// stateOf is the state an action expects the task to be in still.
func stateOf(s mscheduler.Status, paused bool) string {
	if paused {
		return string(s) + ",paused"
	}
	return string(s)
}

// actionsFor lists the actions that apply to a task as it stands.
func actionsFor(t taskRow) []actionButton {
	var out []actionButton
	switch t.Status {
	case mscheduler.StatusFailed, mscheduler.StatusCancelled, mscheduler.StatusInvalid:
		out = append(out, actionButton{Name: "retry", Label: "Retry now"})
	case mscheduler.StatusPending:
		if !t.Paused {
			out = append(out, actionButton{Name: "run-now", Label: "Run now"})
		}
	}
	if !isFinal(t.Status) {
		if t.Paused {
			out = append(out, actionButton{Name: "resume", Label: "Resume"})
		} else {
			out = append(out, actionButton{Name: "pause", Label: "Pause"})
		}
		out = append(out, actionButton{Name: "cancel", Label: "Cancel", Confirm: "Cancel " + t.Key + "? A running handler is cancelled."})
	}
	return append(out, actionButton{Name: "delete", Label: "Delete", Danger: true, Confirm: "Delete " + t.Key + "? This cannot be undone."})
}

func isFinal(s mscheduler.Status) bool {
	switch s {
	case mscheduler.StatusSucceeded, mscheduler.StatusFailed, mscheduler.StatusFinished, mscheduler.StatusCancelled:
		return true
	}
	return false
}

// workerView is a worker with what it holds and its recent runs.
type workerView struct {
	mscheduler.WorkerInfo
	Holds  []heldRun
	Recent []runBar
}

type heldRun struct {
	Collection, Key, RunID string
	Started, LeaseUntil    time.Time
}

type runBar struct {
	Collection, Key string
	Outcome         mscheduler.Outcome
	Started         time.Time
	Finished        time.Time
	Width           int
	Mark            string
}

// recentRuns adds a worker's latest runs of one collection to its view.
func (d *Dashboard) recentRuns(ctx context.Context, p *mscheduler.Producer[bson.RawValue], collection string, v *workerView) error {
	page, err := p.Runs(ctx, mscheduler.RunFilter{WorkerID: v.ID, Limit: workerRuns})
	if err != nil {
		return err
	}
	for _, run := range page.Runs {
		v.Recent = append(v.Recent, barOf(collection, run))
	}
	return nil
}

// recentRunsOfAll adds to each worker of views its recent runs of the
// collection: the collection's newest runs, workerRuns for each worker
// listed, read at once; then, only if those were not all of its runs, the
// runs of each worker that read left short, read alone. A read per worker
// (each index-served on MongoDB, each a scan of the history on a server
// without indexes) made the page take 30 s on a busy development server
// with the twenty workers a crash soak leaves in the registry.
func (d *Dashboard) recentRunsOfAll(ctx context.Context, p *mscheduler.Producer[bson.RawValue], collection string, views []workerView, index map[string]*workerView) error {
	if len(views) == 0 {
		return nil
	}
	page, err := p.Runs(ctx, mscheduler.RunFilter{Limit: min(mscheduler.RunsLimitMax, workerRuns*len(views))})
	if err != nil {
		return err
	}
	found := map[string]int{}
	for _, run := range page.Runs {
		if v := index[run.WorkerID]; v != nil && found[run.WorkerID] < workerRuns {
			found[run.WorkerID]++
			v.Recent = append(v.Recent, barOf(collection, run))
		}
	}
	if page.Next == "" {
		return nil // every run of the collection was read
	}
	for i := range views {
		if v := &views[i]; found[v.ID] < workerRuns {
			v.Recent = slices.DeleteFunc(v.Recent, func(b runBar) bool { return b.Collection == collection })
			if err := d.recentRuns(ctx, p, collection, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func barOf(collection string, run mscheduler.RunInfo) runBar {
	return runBar{Collection: collection, Key: run.Key, Outcome: run.Outcome, Started: run.Started,
		Finished: run.Finished, Width: barWidth(run.Finished.Sub(run.Started)), Mark: markOf(run.Outcome)}
}

// barWidth grows with the log of a run's duration: 6 px for 10 ms, about
// 100 px for an hour.
func barWidth(took time.Duration) int {
	ms := max(1, took.Milliseconds())
	return min(120, 4+int(8*math.Log2(float64(ms))/2))
}

// markOf says why a run did not end on its own.
func markOf(o mscheduler.Outcome) string {
	switch o {
	case mscheduler.OutcomeExpired:
		return "preempted: its lease lapsed and another worker took the slot"
	case mscheduler.OutcomeReleased:
		return "released on shutdown"
	case mscheduler.OutcomeRevoked:
		return "revoked: the worker was no longer allowed"
	case mscheduler.OutcomeCancelled:
		return "cancelled"
	}
	return ""
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.queryContext(r)
	defer cancel()
	c, names, err := d.collectionOf(ctx, r)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	infos, err := mscheduler.ListWorkers(ctx, d.db)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	views := make([]workerView, len(infos))
	index := map[string]*workerView{}
	byRun := map[string]*workerView{} // a gateway executor's runs, which the documents credit to the gateway
	for i := range infos {
		views[i].WorkerInfo = infos[i]
		index[infos[i].ID] = &views[i]
		for _, id := range infos[i].RunIDs {
			byRun[id] = &views[i]
		}
	}
	for _, name := range names {
		p, err := d.producer(ctx, name)
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		running, err := p.List(ctx, mscheduler.ListOpts{Statuses: []mscheduler.Status{mscheduler.StatusRunning}, Limit: listLimitMax})
		if err != nil {
			d.serverError(w, r, err)
			return
		}
		for _, ti := range running {
			for _, h := range ti.Holders {
				held := heldRun{name, ti.Task.Key, h.RunID, h.Started, h.LeaseUntil}
				if v := index[h.WorkerID]; v != nil {
					v.Holds = append(v.Holds, held)
				}
				if v := byRun[h.RunID]; v != nil {
					v.Holds = append(v.Holds, held)
				}
			}
		}
		if err := d.recentRunsOfAll(ctx, p, name, views, index); err != nil {
			d.serverError(w, r, err)
			return
		}
	}
	for i := range views {
		recent := views[i].Recent
		sort.Slice(recent, func(a, b int) bool { return recent[a].Finished.Before(recent[b].Finished) })
		views[i].Recent = recent[max(0, len(recent)-workerRuns):]
	}
	d.render(w, http.StatusOK, "workers", view{Title: "Workers", Nav: "workers", Collections: names, Collection: c, Data: struct{ Workers []workerView }{views}})
}
