package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// Params too large to edit in a page are shown cut, with the way to
// replace them, and not sent whole into an edit box; a task with no source
// or tags says so in its own row, not with a stray separator.
func TestTaskPageBoundsParams(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	big := strings.Repeat("x", 200<<10)
	if _, err := f.producer.Publish(f.t.Context(), mscheduler.Task[email]{Key: "big", Params: email{To: big}, Tags: []string{"mail"}}, nil); err != nil {
		t.Fatal(err)
	}
	pg := f.get(f.taskPath("big"))
	pg.want(t, "big params", http.StatusOK, `id="params-cut"`, "The params are 201 KiB", "--update-params")
	if strings.Contains(pg.body, `<textarea name="params"`) || len(pg.body) > 100<<10 {
		t.Errorf("the page has an edit box or carries the params whole (%d bytes)", len(pg.body))
	}
	f.get(f.taskPath("welcome-1")).want(t, "small params", http.StatusOK, `<textarea name="params"`)

	if _, err := f.producer.Publish(f.t.Context(), mscheduler.Task[email]{Key: "bare"}, nil); err != nil {
		t.Fatal(err)
	}
	pg = f.get(f.taskPath("big"))
	pg.want(t, "tags", http.StatusOK, "<dt>tags</dt><dd>mail</dd>")
	if strings.Contains(pg.body, "; mail") {
		t.Error("a task page shows a stray separator before its tags")
	}
	f.get(f.taskPath("bare")).want(t, "no tags", http.StatusOK, "<dt>tags</dt><dd>-</dd>")
	if strings.Contains(pg.body, "<dt>headers</dt>") {
		t.Error("a task without headers has a headers row")
	}
}

// A task's headers (a trace context, say) are shown on its page, escaped.
func TestTaskPageShowsHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	headers := map[string]string{"traceparent": "00-4bf9-00f0-01", "note": "<b>"}
	if _, err := f.producer.Publish(f.t.Context(), mscheduler.Task[email]{Key: "traced", Headers: headers}, nil); err != nil {
		t.Fatal(err)
	}
	f.get(f.taskPath("traced")).want(t, "headers", http.StatusOK, "<dt>headers</dt><dd>note=&lt;b&gt;, traceparent=00-4bf9-00f0-01</dd>")
}

// The overview's Schedules link names no collection: the page shows the
// first collection that has a recurring task, not the first collection.
func TestSchedulesFindTheirCollection(t *testing.T) {
	t.Parallel()
	planned := mschedulertest.Collection(t)
	plain := planned.Database().Collection(planned.Name() + "_plain") // Collection names one per test
	t.Cleanup(func() {
		for _, name := range []string{plain.Name(), plain.Name() + ".meta", plain.Name() + ".runs"} {
			_ = plain.Database().Collection(name).Drop(context.Background())
		}
	})
	pp := newPlainProducer(t, planned)
	plan := mscheduler.Every(1, mscheduler.Hour)
	if _, err := pp.Publish(t.Context(), mscheduler.Task[email]{Key: "hourly", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := newPlainProducer(t, plain).Publish(t.Context(), mscheduler.Task[email]{Key: "once"}, nil); err != nil {
		t.Fatal(err)
	}
	names := []string{plain.Name(), planned.Name()} // in this order: Config.Collections keeps it
	d, err := dashboard.New(plain.Database(), &dashboard.Config{Collections: names, Token: fixtureToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/schedules", nil)
	req.Header.Set("Authorization", "Bearer "+fixtureToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readAll(t, resp)
	if !strings.Contains(body, "Schedules of "+planned.Name()) || !strings.Contains(body, "hourly") || !strings.Contains(body, `<select name="c">`) {
		t.Errorf("schedules without a collection:\n%.3000s", body)
	}
}

func newPlainProducer(t *testing.T, coll *mongo.Collection) *mscheduler.Producer[email] {
	t.Helper()
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	p, err := mscheduler.NewProducer[email](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A cursor edited by hand in the address is the request's fault: 400,
// saying why, not 502.
func TestMalformedCursorIsABadRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	f.get(f.taskPath("welcome-1")+"&runs_after=zzz").want(t, "a bad runs_after", http.StatusBadRequest, "Bad request", "cursor")
}

// A bulk action acts on each task only as the page showed it: a stale
// page's delete leaves a task that changed since, and says so; the tasks
// that did not change are acted on.
func TestBulkActionChecksEachTasksState(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	form := f.bulk("delete", "later-1", "welcome-1")
	form.Set("seen:later-1", "failed") // the page showed it failed; it is pending
	pg := f.post("tasks?c="+f.coll.Name(), form)
	pg.want(t, "a stale bulk delete", http.StatusConflict, "done on 1 task(s); refused on 1: later-1 (changed since the page showed it: it was failed, it is pending now)")
	if _, err := f.producer.Get(t.Context(), "later-1"); err != nil {
		t.Errorf("the changed task was deleted: %v", err)
	}
	if _, err := f.producer.Get(t.Context(), "welcome-1"); err == nil {
		t.Error("the unchanged task was not deleted")
	}
	form = url.Values{"action": {"delete"}, "key": {"later-1"}} // no state at all: a hand-made form
	f.post("tasks?c="+f.coll.Name(), form).want(t, "a bulk delete without states", http.StatusConflict, "it was not said, it is pending now")
}

// A bulk action acts on each task only at the version the page showed: a
// task that failed again since, its status the same, is left and named;
// the same page drawn again deletes it.
func TestStaleBulkActionLeavesATaskThatRanSince(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	stale := f.bulk("delete", "broken-1")
	if err := f.producer.Retry(t.Context(), "broken-1"); err != nil {
		t.Fatal(err)
	}
	runDue(t, f.coll, f.producer, "broken-1")
	if s := f.status("broken-1"); s != mscheduler.StatusFailed {
		t.Fatalf("broken-1 run again is %s, want failed again", s)
	}
	f.post("tasks?c="+f.coll.Name(), stale).want(t, "a stale bulk delete", http.StatusConflict,
		"done on 0 task(s); refused on 1: broken-1 (it changed since it was read: rev ")
	if _, err := f.producer.Get(t.Context(), "broken-1"); err != nil {
		t.Fatalf("the task that ran since the page was drawn was deleted: %v", err)
	}
	f.post("tasks?c="+f.coll.Name(), f.bulk("delete", "broken-1")).want(t, "a fresh bulk delete", http.StatusSeeOther)
	if _, err := f.producer.Get(t.Context(), "broken-1"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("a fresh page's bulk delete left the task: %v", err)
	}
}

// A bulk action leaves a pending task edited since the page was drawn:
// its params replaced (which moves no rev) or its options updated.
func TestStaleBulkActionLeavesAnEditedTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	c := f.coll.Name()
	stale := f.bulk("cancel", "later-1", "report-hourly")
	f.post(f.taskPath("later-1"), url.Values{"action": {"params"}, "seen": {"pending"}, "params": {`{"to": "carol@example.com"}`}}).
		want(t, "edit params", http.StatusSeeOther)
	if err := f.producer.Update(t.Context(), "report-hourly", mscheduler.TaskUpdate{Description: new("daily report")}); err != nil {
		t.Fatal(err)
	}
	f.post("tasks?c="+c, stale).want(t, "a stale bulk cancel", http.StatusConflict,
		"refused on 2: later-1 (it changed since it was read", "report-hourly (it changed since it was read")
	if a, b := f.status("later-1"), f.status("report-hourly"); a != mscheduler.StatusPending || b != mscheduler.StatusPending {
		t.Fatalf("a stale bulk cancel left later-1 %s, report-hourly %s; want both pending", a, b)
	}
	noVersion := f.bulk("cancel", "later-1")
	noVersion.Del("version:later-1")
	f.post("tasks?c="+c, noVersion).want(t, "a bulk cancel without versions", http.StatusConflict,
		"later-1 (the page did not say which version of the task it showed")
	f.post("tasks?c="+c, f.bulk("cancel", "later-1", "report-hourly")).want(t, "a fresh bulk cancel", http.StatusSeeOther)
	if a, b := f.status("later-1"), f.status("report-hourly"); a != mscheduler.StatusCancelled || b != mscheduler.StatusCancelled {
		t.Fatalf("a fresh bulk cancel left later-1 %s, report-hourly %s", a, b)
	}
}

// An action is a url-encoded form: a multipart body is refused unread.
func TestMultipartActionIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	req := f.request(http.MethodPost, f.taskPath("broken-1"), nil)
	req.Body = io.NopCloser(strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nretry\r\n--x--\r\n"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	req.Header.Set("Authorization", "Bearer "+f.token)
	f.do(f.sameOrigin(req)).want(t, "a multipart action", http.StatusUnsupportedMediaType, "url-encoded")
	if f.status("broken-1") != mscheduler.StatusFailed {
		t.Error("a multipart action acted")
	}
}
