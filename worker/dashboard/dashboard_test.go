package dashboard_test

import (
	"cmp"
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

type email struct {
	To string `bson:"to"`
}

// fixture is a collection with a failed, a pending, a recurring and a
// succeeded task, and a dashboard of it.
type fixture struct {
	t        *testing.T
	coll     *mongo.Collection
	producer *mscheduler.Producer[email]
	server   *httptest.Server
	client   *http.Client
	token    string // the dashboard's, sent by get and post; empty for none
}

// fixtureToken is the token of a fixture's dashboard when its Config has
// none: a dashboard acts only with a token.
const fixtureToken = "fixture-token"

// newFixture serves a dashboard with cfg, and fixtureToken unless cfg
// has a token.
func newFixture(t *testing.T, cfg dashboard.Config) *fixture {
	t.Helper()
	cfg.Token = cmp.Or(cfg.Token, fixtureToken)
	return startFixture(t, cfg)
}

// newTokenlessFixture serves a dashboard with cfg and no token, not even
// one from the environment. Its test cannot be parallel.
func newTokenlessFixture(t *testing.T, cfg dashboard.Config) *fixture {
	t.Helper()
	t.Setenv(dashboard.EnvToken, "")
	cfg.Token = ""
	return startFixture(t, cfg)
}

func startFixture(t *testing.T, cfg dashboard.Config) *fixture {
	t.Helper()
	ctx := t.Context()
	coll := mschedulertest.Collection(t)
	p, err := mscheduler.NewProducer[email](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := mscheduler.Every(1, mscheduler.Hour)
	plan.Start = time.Now().Add(time.Hour)
	tasks := []mscheduler.Task[email]{
		{Key: "welcome-1", Params: email{To: "ada@example.com"}, Tags: []string{"mail"}, Description: "welcome email"},
		{Key: "broken-1", Params: email{}, MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
		{Key: "later-1", Params: email{To: "bob@example.com"}, RunAt: time.Now().Add(time.Hour)},
		{Key: "report-hourly", Plan: &plan, Description: "hourly report"},
	}
	if _, err := p.PublishMany(ctx, tasks, nil); err != nil {
		t.Fatal(err)
	}
	runDue(t, coll, p, "welcome-1", "broken-1")
	cfg.Collections = []string{coll.Name()}
	d, err := dashboard.New(coll.Database(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &fixture{t: t, coll: coll, producer: p, server: srv, client: client, token: cfg.Token}
}

// runDue runs the tasks of coll that are due until each of keys is done,
// as the fixture's worker: it sends the emails, failing those without a
// recipient.
func runDue(t *testing.T, coll *mongo.Collection, p *mscheduler.Producer[email], keys ...string) {
	t.Helper()
	ctx := t.Context()
	c, err := mscheduler.NewConsumer(coll, func(_ context.Context, task *mscheduler.Task[email]) (string, error) {
		if task.Params.To == "" {
			return "", errors.New("no recipient")
		}
		return "sent to " + task.Params.To, nil
	}, &mscheduler.ConsumerConfig{WorkerID: workerOf(coll), PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if _, err := p.Wait(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
}

// workerOf is the id of the fixture's worker: its own, since every test
// shares the worker registry of the database.
func workerOf(coll *mongo.Collection) string { return "node-a-" + coll.Name() }

type page struct {
	code     int
	body     string
	location string
	header   http.Header
}

func (f *fixture) do(req *http.Request) page {
	f.t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return page{resp.StatusCode, string(body), resp.Header.Get("Location"), resp.Header}
}

// request is a request to the dashboard with no credentials; a form
// makes it a POST.
func (f *fixture) request(method, path string, form url.Values) *http.Request {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.server.URL+"/"+strings.TrimPrefix(path, "/"), body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req
}

// authorized adds the fixture's token to a request, as a script sends it.
func (f *fixture) authorized(req *http.Request) *http.Request {
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	return req
}

func (f *fixture) get(path string) page {
	f.t.Helper()
	return f.do(f.authorized(f.request(http.MethodGet, path, nil)))
}

func (f *fixture) post(path string, form url.Values) page {
	f.t.Helper()
	return f.do(f.authorized(f.request(http.MethodPost, path, form)))
}

// bulk is the form of a bulk action on keys as the tasks page drawn now
// sends it: each key with what the page shows of its task.
func (f *fixture) bulk(action string, keys ...string) url.Values {
	f.t.Helper()
	list := f.get("tasks?" + url.Values{"c": {f.coll.Name()}}.Encode())
	form := url.Values{"action": {action}, "key": keys}
	for _, key := range keys {
		for _, field := range []string{"seen:" + key, "version:" + key} {
			shown := regexp.MustCompile(`name="` + regexp.QuoteMeta(field) + `" value="([^"]*)"`).FindStringSubmatch(list.body)
			if shown != nil {
				form.Set(field, html.UnescapeString(shown[1]))
			}
		}
	}
	return form
}

func (f *fixture) taskPath(key string) string {
	return "task?" + url.Values{"c": {f.coll.Name()}, "key": {key}}.Encode()
}

func (f *fixture) status(key string) mscheduler.Status {
	f.t.Helper()
	ti, err := f.producer.Get(f.t.Context(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return ti.Status
}

// want fails the test unless the page has the code and every text.
func (p page) want(t *testing.T, what string, code int, texts ...string) {
	t.Helper()
	if p.code != code {
		t.Errorf("%s: status %d, want %d; body:\n%.2000s", what, p.code, code, p.body)
		return
	}
	for _, s := range texts {
		if !strings.Contains(p.body, s) {
			t.Errorf("%s: page does not contain %q; body:\n%.3000s", what, s, p.body)
		}
	}
}

func TestPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	c := f.coll.Name()
	f.get("").want(t, "overview", 200, c, ">failed<", "runs, last hour", "Workers")
	f.get("tasks?c="+c).want(t, "tasks", 200, "welcome-1", "broken-1", "report-hourly", "later-1", "welcome email")
	list := f.get("tasks?c=" + c + "&status=failed")
	list.want(t, "tasks by status", 200, "broken-1")
	if strings.Contains(list.body, "welcome-1") {
		t.Error("the failed filter lists welcome-1")
	}
	f.get("tasks?c="+c+"&limit=1").want(t, "first page", 200, "Next page", "after=broken-1")
	byPrefix := f.get("tasks?c=" + c + "&prefix=welcome")
	byPrefix.want(t, "tasks by key prefix", 200, "welcome-1", `value="welcome"`)
	if strings.Contains(byPrefix.body, "broken-1") {
		t.Error("the key prefix filter lists broken-1")
	}
	f.get(f.taskPath("broken-1")).want(t, "failed task", 200, "no recipient", "Retry now", "node-a", `value="failed"`)
	f.get(f.taskPath("welcome-1")).want(t, "succeeded task", 200, "sent to ada@example.com", "ada@example.com")
	f.get(f.taskPath("later-1")).want(t, "pending task", 200, `value="reschedule"`, `name="params"`, "bob@example.com", `value="run-now"`)
	f.get(f.taskPath("report-hourly")).want(t, "plan", 200, "every 1 hour", "next planned times", "Skip")
	f.get("schedules?c="+c).want(t, "schedules", 200, "report-hourly", "every 1 hour")
	f.get("static/live.js").want(t, "script", 200, "data-live")
	f.get("static/style.css").want(t, "style", 200, "prefers-color-scheme")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	c := f.coll.Name()
	f.get(f.taskPath("nope")).want(t, "unknown key", 404, `No task has the key &#34;nope&#34;`)
	f.get("tasks?c=elsewhere").want(t, "unknown collection", 404, "no such task collection")
	f.get("tasks?c="+c+"&status=queued").want(t, "bad status", 400, "Bad filter: status &#34;queued&#34;")
	f.get("tasks?c="+c+"&limit=0").want(t, "bad limit", 400, "limit &#34;0&#34;")
	f.get("nowhere").want(t, "unknown page", 404, "No such page")
	f.post(f.taskPath("broken-1"), url.Values{"action": {"explode"}, "seen": {"failed"}}).want(t, "unknown action", 400, "unknown action")
	f.post(f.taskPath("broken-1"), url.Values{"action": {"skip"}, "seen": {"failed"}, "n": {"x"}}).want(t, "skip without a plan", 400, "Nothing was done")
	f.post("tasks?c="+c, url.Values{"action": {"retry"}}).want(t, "bulk with no task", 400, "Select from 1")
}

func TestActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	c := f.coll.Name()
	// The page showed broken-1 failed: retry applies.
	r := f.post(f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}})
	if r.code != http.StatusSeeOther || !strings.Contains(r.location, "done=retry") {
		t.Fatalf("retry: %d to %q", r.code, r.location)
	}
	if s := f.status("broken-1"); s != mscheduler.StatusPending {
		t.Fatalf("after retry: %s", s)
	}
	f.get(r.location).want(t, "after retry", 200, "Done: retry.")
	// A page that still shows it failed acts on a task that changed.
	f.post(f.taskPath("broken-1"), url.Values{"action": {"cancel"}, "seen": {"failed"}}).want(t, "stale page", 409, "changed since the page showed it")
	if s := f.status("broken-1"); s != mscheduler.StatusPending {
		t.Fatalf("a stale action changed the task: %s", s)
	}
	f.post(f.taskPath("later-1"), url.Values{"action": {"pause"}, "seen": {"pending"}}).want(t, "pause", 303)
	f.post(f.taskPath("later-1"), url.Values{"action": {"run-now"}, "seen": {"pending,paused"}}).want(t, "run-now of a paused task", 409, "paused")
	f.post(f.taskPath("later-1"), url.Values{"action": {"resume"}, "seen": {"pending,paused"}}).want(t, "resume", 303)
	f.post(f.taskPath("later-1"), url.Values{"action": {"params"}, "seen": {"pending"}, "params": {`{"to": "carol@example.com"}`}}).want(t, "edit params", 303)
	f.post(f.taskPath("later-1"), url.Values{"action": {"params"}, "seen": {"pending"}, "params": {`{to: carol`}}).want(t, "bad params", 400, "params", "must be one JSON value")
	f.post(f.taskPath("later-1"), url.Values{"action": {"params"}, "seen": {"pending"}, "params": {`{"to": "x"}, 5`}}).want(t, "params and more", 400, "params", "must be one JSON value")
	f.post(f.taskPath("later-1"), url.Values{"action": {"reschedule"}, "seen": {"pending"}, "run_at": {"2031-05-06T07:08:09"}}).want(t, "reschedule", 303)
	f.post(f.taskPath("later-1"), url.Values{"action": {"reschedule"}, "seen": {"pending"}, "run_at": {"tomorrow"}}).want(t, "bad run_at", 400, "run_at")
	if ti, err := f.producer.Get(t.Context(), "later-1"); err != nil || ti.Task.Params.To != "carol@example.com" ||
		!ti.Task.RunAt.Equal(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Fatalf("after the params edit and reschedule: %+v, run at %s, %v", ti.Task.Params, ti.Task.RunAt, err)
	}
	f.post(f.taskPath("report-hourly"), url.Values{"action": {"skip"}, "seen": {"pending"}, "n": {"2"}}).want(t, "skip", 303)
	if ti, err := f.producer.Get(t.Context(), "report-hourly"); err != nil || ti.Plan.SkipNext != 2 {
		t.Fatalf("after skip 2: %+v, %v", ti.Plan, err)
	}
	f.post(f.taskPath("later-1"), url.Values{"action": {"cancel"}, "seen": {"pending"}}).want(t, "cancel", 303)
	f.post(f.taskPath("welcome-1"), url.Values{"action": {"delete"}, "seen": {"succeeded"}}).want(t, "delete", 303)
	if _, err := f.producer.Get(t.Context(), "welcome-1"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	// Bulk: cancelled later-1 and pending broken-1; retry applies to one.
	bulk := f.post("tasks?c="+c, f.bulk("retry", "later-1", "broken-1"))
	bulk.want(t, "bulk retry", 409, "retry done on 1 task(s); refused on 1: broken-1 (only a failed, cancelled or invalid task")
	if strings.Contains(bulk.body, "mscheduler:") || strings.Contains(bulk.body, "[") {
		t.Errorf("bulk refusals repeat the library's prefix or show Go's slice brackets:\n%.2000s", bulk.body)
	}
	if s := f.status("later-1"); s != mscheduler.StatusPending {
		t.Fatalf("bulk retry left later-1 %s", s)
	}
	f.post("tasks?c="+c, f.bulk("cancel", "later-1", "report-hourly")).want(t, "bulk cancel", 303)
	if a, b := f.status("later-1"), f.status("report-hourly"); a != mscheduler.StatusCancelled || b != mscheduler.StatusCancelled {
		t.Fatalf("after bulk cancel: %s, %s", a, b)
	}
	// A cancelled plan has no next planned time, on any page.
	f.get(f.taskPath("report-hourly")).want(t, "a cancelled plan's page", 200, "none: the task is cancelled")
	f.get("schedules?c="+c).want(t, "schedules with a cancelled plan", 200, "<td>none</td>")
	f.post("tasks?c="+c, f.bulk("delete", "later-1", "report-hourly")).want(t, "bulk delete", 303)
	if list, err := f.producer.List(t.Context(), mscheduler.ListOpts{}); err != nil || len(list) != 1 || list[0].Task.Key != "broken-1" {
		t.Fatalf("after bulk delete: %d tasks (%v), want broken-1 alone", len(list), err)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{ReadOnly: true})
	p := f.get(f.taskPath("broken-1"))
	p.want(t, "read-only task page", 200, "no recipient", "started read-only")
	if strings.Contains(p.body, "Retry now") || strings.Contains(p.body, `method="post"`) {
		t.Error("a read-only page shows actions")
	}
	if list := f.get("tasks?c=" + f.coll.Name()); strings.Contains(list.body, `method="post"`) {
		t.Error("a read-only list has a form that acts")
	}
	f.post(f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}}).want(t, "read-only POST", 403, "read-only")
	f.post("tasks?c="+f.coll.Name(), url.Values{"action": {"retry"}, "key": {"broken-1"}}).want(t, "read-only bulk POST", 403, "read-only")
	if s := f.status("broken-1"); s != mscheduler.StatusFailed {
		t.Fatalf("a read-only dashboard changed the task: %s", s)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{Token: "s3cret"})
	f.do(f.request(http.MethodGet, "", nil)).want(t, "no token", 401, "needs its token")
	for name, set := range map[string]func(*http.Request){
		"basic":            func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") },
		"bearer":           func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
		"lowercase bearer": func(r *http.Request) { r.Header.Set("Authorization", "bearer s3cret") },
		"wrong":            func(r *http.Request) { r.SetBasicAuth("ops", "guess") },
		"bearer, wrong":    func(r *http.Request) { r.Header.Set("Authorization", "bearer guess") },
	} {
		req := f.request(http.MethodGet, "", nil)
		set(req)
		want := 200
		if strings.Contains(name, "wrong") {
			want = 401
		}
		f.do(req).want(t, name, want)
	}
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	form := url.Values{"action": {"retry"}, "seen": {"failed"}}
	for name, set := range map[string]func(*http.Request){
		"fetch metadata": func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") },
		"origin":         func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
	} {
		// With the token, so that the refusal is the origin's.
		req := f.authorized(f.request(http.MethodPost, f.taskPath("broken-1"), form))
		set(req)
		if p := f.do(req); p.code != http.StatusForbidden {
			t.Errorf("%s: cross-origin POST answered %d, want 403", name, p.code)
		}
	}
	if s := f.status("broken-1"); s != mscheduler.StatusFailed {
		t.Fatalf("a cross-origin POST changed the task: %s", s)
	}
}

func TestWorkersPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	info := mscheduler.WorkerInfo{ID: workerOf(f.coll), Host: "box", PID: 42, Version: mscheduler.Version,
		Collections: []string{f.coll.Name()}, Capacity: 4, HeartbeatMS: 60_000, StartedAt: time.Now()}
	if err := mscheduler.Heartbeat(t.Context(), f.coll.Database(), info); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), info.ID) })
	// Its timeline has the two runs it made, the failed one marked.
	f.get("workers").want(t, "workers", 200, info.ID, "box, 42", "0 of 4", `class="bar o-failed"`, `class="bar o-succeeded"`, "broken-1 failed")
}

// TestRunningTaskShowsItsHolder: a task being run shows its worker, run
// and lease end on its page (a <time> the script counts down), and the
// worker's entry on the workers page lists it.
func TestRunningTaskShowsItsHolder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	id := workerOf(f.coll) + "-2"
	if _, err := f.producer.Publish(t.Context(), mscheduler.Task[email]{Key: "slow-1", Params: email{To: "slow@example.com"}}, nil); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan struct{})
	c, err := mscheduler.NewConsumer(f.coll, func(ctx context.Context, _ *mscheduler.Task[email]) (string, error) {
		close(claimed)
		<-ctx.Done()
		return "", context.Cause(ctx)
	}, &mscheduler.ConsumerConfig{WorkerID: id, PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The handler waits for its context: a short stop cancels it.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = c.Stop(ctx)
	})
	<-claimed
	info := mscheduler.WorkerInfo{ID: id, Host: "box", PID: 7, Collections: []string{f.coll.Name()}, Capacity: 1, Running: 1, HeartbeatMS: 60_000}
	if err := mscheduler.Heartbeat(t.Context(), f.coll.Database(), info); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), id) })
	ti, err := f.producer.Get(t.Context(), "slow-1")
	if err != nil || len(ti.Holders) != 1 {
		t.Fatalf("Get: %+v, %v", ti, err)
	}
	h := ti.Holders[0]
	lease := `<td class="countdown"><time datetime="` + h.LeaseUntil.UTC().Format(time.RFC3339) + `"`
	f.get(f.taskPath("slow-1")).want(t, "running task", 200, "Running now", id, h.RunID, lease, `value="cancel"`, "every slot is running")
	f.get("workers").want(t, "workers", 200, id, "1 of 1", "/slow-1</a>", h.RunID)
	f.get("tasks?c="+f.coll.Name()+"&worker="+id).want(t, "tasks held by the worker", 200, "slow-1")

	// A gateway executor holding that run through the gateway (whose
	// worker the document names) lists it too, by its run id.
	executor := mscheduler.WorkerInfo{ID: id + "-exec", Host: "10.0.0.9", Version: "gateway executor via " + id,
		Collections: []string{f.coll.Name()}, Running: 1, RunIDs: []string{h.RunID}, HeartbeatMS: 60_000}
	if err := mscheduler.Heartbeat(t.Context(), f.coll.Database(), executor); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), executor.ID) })
	pg := f.get("workers")
	_, section, _ := strings.Cut(pg.body, `<section id="`+executor.ID+`">`)
	section, _, _ = strings.Cut(section, "</section>")
	if !strings.Contains(section, "/slow-1</a>") {
		t.Fatalf("the executor's entry does not list the run it holds through the gateway:\n%s", pg.body)
	}
}
