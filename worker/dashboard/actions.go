package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// scheduleRow is a recurring task on the schedules page.
type scheduleRow struct {
	Key, Spec             string
	Next                  time.Time
	Status                mscheduler.Status
	Paused                bool
	LastOutcome           mscheduler.Outcome
	Runs, Skipped, Missed int
}

// schedulePage is the number of recurring tasks on a page: each costs a
// query of its last run.
const schedulePage = 50

// firstWithPlans is the first collection of names with a recurring task,
// for a schedules page that names none (the overview's link): the first
// collection may well have none. It is c, with its producer p, when none
// has any or they cannot be read.
func (d *Dashboard) firstWithPlans(ctx context.Context, names []string, c string, p *mscheduler.Producer[bson.RawValue]) (string, *mscheduler.Producer[bson.RawValue]) {
	for _, name := range names {
		q, err := d.producer(ctx, name)
		if err != nil {
			return c, p
		}
		if list, err := q.List(ctx, mscheduler.ListOpts{Recurring: true, Limit: 1}); err == nil && len(list) > 0 {
			return name, q
		}
	}
	return c, p
}

func (d *Dashboard) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.queryContext(r)
	defer cancel()
	sc := d.scope(ctx, w, r)
	if sc == nil {
		return
	}
	c, names, p := sc.c, sc.names, sc.p
	if r.URL.Query().Get("c") == "" {
		c, p = d.firstWithPlans(ctx, names, c, p)
	}
	list, err := p.List(ctx, mscheduler.ListOpts{Recurring: true, After: r.URL.Query().Get("after"), Limit: schedulePage + 1})
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	data := struct {
		Schedules []scheduleRow
		NextPage  string
	}{}
	if len(list) > schedulePage {
		list = list[:schedulePage]
		data.NextPage = "schedules?" + url.Values{"c": {c}, "after": {list[len(list)-1].Task.Key}}.Encode()
	}
	for i := range list {
		ti := &list[i]
		row := scheduleRow{Key: ti.Task.Key, Status: ti.Status, Paused: ti.Paused}
		if ti.Task.Plan != nil {
			row.Spec = ti.Task.Plan.String()
		}
		if st := ti.Plan; st != nil {
			row.Runs, row.Skipped, row.Missed = st.Runs, st.Skipped, st.Missed
			if len(st.Upcoming) > 0 {
				row.Next = st.Upcoming[0]
			}
		}
		if last, err := p.Runs(ctx, mscheduler.RunFilter{Key: ti.Task.Key, Limit: 1}); err == nil && len(last.Runs) > 0 {
			row.LastOutcome = last.Runs[0].Outcome
		}
		data.Schedules = append(data.Schedules, row)
	}
	d.render(w, http.StatusOK, "schedules", view{Title: "Schedules", Nav: "schedules", Collections: names, Collection: c, Data: data})
}

// doneCode is what a redirect after an action says was done.
var doneCode = regexp.MustCompile(`^(retry|cancel|run-now|pause|resume|delete|skip|params|reschedule)(:[0-9]+)?$`)

// doneMessage turns a done code into a notice; anything else shows nothing,
// so that a link cannot put words on the page.
func doneMessage(code string) string {
	m := doneCode.FindStringSubmatch(code)
	if m == nil {
		return ""
	}
	if m[2] != "" {
		return fmt.Sprintf("Done: %s, %s task(s).", m[1], m[2][1:])
	}
	return "Done: " + m[1] + "."
}

// refuseActionsIfReadOnly refuses, on a read-only dashboard, every request
// but a read, before any handler: a POST added later is covered too.
func (d *Dashboard) refuseActionsIfReadOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.ReadOnly() && r.Method != http.MethodGet && r.Method != http.MethodHead {
			d.fail(w, r, http.StatusForbidden, d.refusal())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal says why an action was refused on a read-only dashboard, and,
// when it lacks a token, how to give it one.
func (d *Dashboard) refusal() string {
	if d.cfg.ReadOnly {
		return "Nothing was done: this dashboard is read-only (Config.ReadOnly, the command's --read-only)."
	}
	return "Nothing was done: this dashboard is read-only because it has no token, and acting needs one. " +
		"Set one with the " + EnvToken + " environment variable or Config.Token, then open a page with ?token=<token> " +
		"(\"mscheduler dashboard\" makes one at each start and prints that link, unless --read-only)."
}

// act applies one action to one task, if it is still in the state the
// page showed; then it shows the task again (or the list, after a delete).
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request) {
	if !d.readForm(w, r) {
		return
	}
	ctx, cancel := d.queryContext(r)
	defer cancel()
	c, key, action := r.URL.Query().Get("c"), r.URL.Query().Get("key"), r.PostFormValue("action")
	p, err := d.producer(ctx, c)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	ti, err := p.Get(ctx, key)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	if seen := r.PostFormValue("seen"); seen != stateOf(ti.Status, ti.Paused) {
		d.fail(w, r, http.StatusConflict, fmt.Sprintf("%s changed since the page showed it (it was %s, it is %s now): nothing was done. Look at it again and retry.",
			key, orUnknown(seen), stateOf(ti.Status, ti.Paused)))
		return
	}
	if err := d.apply(ctx, p, key, action, r.PostForm); err != nil {
		d.actionError(w, r, key, err)
		return
	}
	target := "task?" + url.Values{"c": {c}, "key": {key}, "done": {action}}.Encode()
	if action == "delete" {
		target = "tasks?" + url.Values{"c": {c}, "done": {action}}.Encode()
	}
	seeOther(w, r, target)
}

// parseParams reads params typed as extended JSON: a document, or any
// other value, and nothing after it (wrapped as {"v": ...}, "1, "x": 2"
// would read as 1).
func parseParams(text string) (bson.RawValue, error) {
	var wrapped bson.Raw
	if !json.Valid([]byte(text)) {
		return bson.RawValue{}, &mscheduler.InvalidError{Field: "params", Reason: "must be one JSON value (extended JSON for dates and the like)"}
	}
	if err := bson.UnmarshalExtJSON([]byte(`{"v":`+text+`}`), false, &wrapped); err != nil {
		return bson.RawValue{}, &mscheduler.InvalidError{Field: "params", Reason: "must be JSON (extended JSON for dates and the like): " + err.Error()}
	}
	return wrapped.Lookup("v"), nil
}

// errBadAction is a form that names no known action.
var errBadAction = errors.New("unknown action")

// apply runs one action through the library; form holds its values.
// Retry, cancel and delete (the bulk actions) apply only to a task that
// meets conds.
func (d *Dashboard) apply(ctx context.Context, p *mscheduler.Producer[bson.RawValue], key, action string, form url.Values, conds ...mscheduler.Condition) error {
	switch action {
	case "retry":
		return p.Retry(ctx, key, conds...)
	case "cancel":
		return p.Cancel(ctx, key, conds...)
	case "run-now":
		return p.RunNow(ctx, key)
	case "pause":
		return p.Pause(ctx, key)
	case "resume":
		return p.Resume(ctx, key)
	case "delete":
		return p.Delete(ctx, key, &mscheduler.DeleteOpts{Force: true}, conds...)
	case "skip":
		n := form.Get("n")
		count, err := strconv.Atoi(n)
		if err != nil {
			return &mscheduler.InvalidError{Field: "n", Reason: fmt.Sprintf("must be a whole number, got %q", n)}
		}
		return p.SkipNext(ctx, key, count)
	case "params":
		params, err := parseParams(form.Get("params"))
		if err != nil {
			return err
		}
		_, err = p.Publish(ctx, mscheduler.Task[bson.RawValue]{Key: key, Params: params}, &mscheduler.PublishOpts{UpdateParams: true})
		return err
	case "reschedule":
		at, err := time.Parse("2006-01-02T15:04:05", form.Get("run_at"))
		if err != nil {
			at, err = time.Parse("2006-01-02T15:04", form.Get("run_at"))
		}
		if err != nil {
			return &mscheduler.InvalidError{Field: "run_at", Reason: fmt.Sprintf("must be a date and time like 2026-12-24T18:00 (UTC), got %q", form.Get("run_at"))}
		}
		_, err = p.Publish(ctx, mscheduler.Task[bson.RawValue]{Key: key, Params: bson.RawValue{Type: bson.TypeNull}, RunAt: at}, &mscheduler.PublishOpts{MoveRunAt: true})
		return err
	}
	return fmt.Errorf("%w %q", errBadAction, action)
}

// actionError shows why an action was refused.
func (d *Dashboard) actionError(w http.ResponseWriter, r *http.Request, key string, err error) {
	switch {
	case errors.Is(err, mscheduler.ErrNotApplicable):
		d.fail(w, r, http.StatusConflict, "Nothing was done: "+err.Error())
	case errors.Is(err, mscheduler.ErrInvalid), errors.Is(err, errBadAction):
		d.fail(w, r, http.StatusBadRequest, "Nothing was done: "+err.Error())
	default:
		d.serverError(w, r, err)
	}
}

// actMany applies one action to the tasks selected in the list.
func (d *Dashboard) actMany(w http.ResponseWriter, r *http.Request) {
	if !d.readForm(w, r) {
		return
	}
	ctx, cancel := d.queryContext(r)
	defer cancel()
	c, action, keys := r.URL.Query().Get("c"), r.PostForm.Get("action"), r.PostForm["key"]
	switch action {
	case "retry", "cancel", "delete":
	default:
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Nothing was done: %q is not an action on several tasks (retry, cancel, delete).", action))
		return
	}
	if len(keys) == 0 || len(keys) > listLimitMax {
		d.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Select from 1 to %d tasks; %d were selected.", listLimitMax, len(keys)))
		return
	}
	p, err := d.producer(ctx, c)
	if err != nil {
		d.serverError(w, r, err)
		return
	}
	done := 0
	var refused []string
	for _, key := range keys {
		// Each task as the page showed it: a stale page must not delete or
		// cancel tasks that changed since, even back to the same status.
		if why := d.changedSince(ctx, p, key, r.PostForm.Get("seen:"+key)); why != "" {
			refused = append(refused, key+" ("+why+")")
			continue
		}
		shown, ok := parseVersion(r.PostForm.Get("version:" + key))
		if !ok {
			refused = append(refused, key+" (the page did not say which version of the task it showed: reload the page)")
			continue
		}
		err := d.apply(ctx, p, key, action, nil, shown)
		switch {
		case err == nil:
			done++
		case errors.Is(err, mscheduler.ErrNotApplicable), errors.Is(err, mscheduler.ErrNotFound):
			refused = append(refused, key+" ("+refusal(err)+")")
		default:
			d.serverError(w, r, err)
			return
		}
	}
	if len(refused) > 0 {
		d.fail(w, r, http.StatusConflict, fmt.Sprintf("%s done on %d task(s); refused on %d: %s.", action, done, len(refused), strings.Join(refused, ", ")))
		return
	}
	seeOther(w, r, "tasks?"+url.Values{"c": {c}, "done": {fmt.Sprintf("%s:%d", action, done)}}.Encode())
}

// versionOf is the version of a task a page shows, for a bulk action to
// act on that version only: its rev and updated_at (milliseconds, as
// stored), which a publish of new params moves without the rev.
func versionOf(rev int64, updated time.Time) string {
	return strconv.FormatInt(rev, 10) + "@" + strconv.FormatInt(updated.UnixMilli(), 10)
}

// parseVersion reads a version made by versionOf as the condition that
// the task is still at it.
func parseVersion(s string) (mscheduler.Condition, bool) {
	rev, ms, found := strings.Cut(s, "@")
	r, err1 := strconv.ParseInt(rev, 10, 64)
	m, err2 := strconv.ParseInt(ms, 10, 64)
	if !found || err1 != nil || err2 != nil {
		return mscheduler.Condition{}, false
	}
	return mscheduler.IfUnchanged(r, time.UnixMilli(m)), true
}

func orUnknown(s string) string {
	if s == "" {
		return "not said"
	}
	return s
}

// readForm reads a POST's form; a body past MaxBodyBytes is refused with
// 413, any other unreadable form with 400, and nothing is done.
func (d *Dashboard) readForm(w http.ResponseWriter, r *http.Request) bool {
	// The pages send url-encoded forms only; a multipart body (files,
	// parts of any size) is not read at all.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		d.fail(w, r, http.StatusUnsupportedMediaType, "Nothing was done: an action is a url-encoded form (application/x-www-form-urlencoded).")
		return false
	}
	err := r.ParseForm()
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		d.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("Nothing was done: the form is larger than %d bytes (MaxBodyBytes).", tooLarge.Limit))
	default:
		d.fail(w, r, http.StatusBadRequest, "Nothing was done: the form could not be read: "+err.Error())
	}
	return false
}

// refusal says in a few words why an action did not apply to a task, for
// a list that names the task itself: the library's message repeats the
// package, the action and the key.
func refusal(err error) string {
	var ae *mscheduler.ActionError
	switch {
	case errors.As(err, &ae):
		return ae.Reason
	case errors.Is(err, mscheduler.ErrNotFound):
		return "no such task"
	}
	return err.Error()
}

// changedSince says why a task of a bulk action is not acted on: it
// changed since the page showed it in state seen, or is gone. Empty: act.
func (d *Dashboard) changedSince(ctx context.Context, p *mscheduler.Producer[bson.RawValue], key, seen string) string {
	ti, err := p.Get(ctx, key)
	switch {
	case errors.Is(err, mscheduler.ErrNotFound):
		return "no such task"
	case err != nil:
		return "could not be read: nothing was done"
	case seen != stateOf(ti.Status, ti.Paused):
		return fmt.Sprintf("changed since the page showed it: it was %s, it is %s now", orUnknown(seen), stateOf(ti.Status, ti.Paused))
	}
	return ""
}

// seeOther sends the browser on to page, a page of the dashboard. Under
// http.StripPrefix (a worker's listener mounts it at /dashboard/) the
// request's path has lost the prefix, so a page relative to it would
// leave the dashboard: the address is made from the prefix the browser
// asked under.
func seeOther(w http.ResponseWriter, r *http.Request, page string) {
	http.Redirect(w, r, mountPrefix(r)+"/"+page, http.StatusSeeOther)
}
