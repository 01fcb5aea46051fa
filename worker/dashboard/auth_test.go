package dashboard_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// sameOrigin makes a request look like a form the dashboard's own page
// sent, so that only the dashboard's rules can refuse it.
func (f *fixture) sameOrigin(req *http.Request) *http.Request {
	req.Header.Set("Origin", f.server.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return req
}

// snapshot is every document of the fixture's collection, to see that a
// refused request wrote nothing.
func (f *fixture) snapshot() []byte {
	f.t.Helper()
	cur, err := f.coll.Find(f.t.Context(), bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		f.t.Fatal(err)
	}
	var docs []bson.Raw
	if err := cur.All(f.t.Context(), &docs); err != nil {
		f.t.Fatal(err)
	}
	var all []byte
	for _, d := range docs {
		all = append(all, d...)
	}
	return all
}

// TestTokenlessIsReadOnly: a dashboard without a token shows no action
// and says why where they would be; a POST its own page could have sent
// is refused with how to set a token, and writes nothing.
func TestTokenlessIsReadOnly(t *testing.T) {
	f := newTokenlessFixture(t, dashboard.Config{})
	c := f.coll.Name()
	task := f.get(f.taskPath("broken-1"))
	task.want(t, "tokenless task page", 200, "no recipient", `id="read-only"`, "acting needs a token", dashboard.EnvToken)
	list := f.get("tasks?c=" + c)
	list.want(t, "tokenless list", 200, "broken-1", `id="read-only"`, "acting needs a token")
	for what, p := range map[string]page{"task page": task, "list": list} {
		for _, action := range []string{`method="post"`, `name="action"`, "Retry now", `type="checkbox"`} {
			if strings.Contains(p.body, action) {
				t.Errorf("tokenless %s shows %s", what, action)
			}
		}
	}
	before := f.snapshot()
	for _, a := range []struct {
		path string
		form url.Values
	}{
		{f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}}},
		{f.taskPath("welcome-1"), url.Values{"action": {"delete"}, "seen": {"succeeded"}}},
		{"tasks?c=" + c, url.Values{"action": {"delete"}, "key": {"broken-1", "welcome-1", "later-1"}}},
	} {
		p := f.do(f.sameOrigin(f.request(http.MethodPost, a.path, a.form)))
		p.want(t, "tokenless "+a.form.Get("action")+" of "+a.path, 403, "needs one", dashboard.EnvToken, "?token=")
	}
	if !bytes.Equal(before, f.snapshot()) {
		t.Fatal("a refused POST changed the collection")
	}
}

// TestLoginLink: a link with the token sets a session cookie and sends the
// browser to the same page without the token; the cookie then stands for
// the token, for pages and actions alike.
func TestLoginLink(t *testing.T) {
	t.Parallel()
	const token = "link-s3cret"
	f := newFixture(t, dashboard.Config{Token: token})
	c := f.coll.Name()
	wrong := f.do(f.request(http.MethodGet, "?token=wrong", nil))
	wrong.want(t, "a link with a wrong token", 401, "not this dashboard's token")
	if got := wrong.header.Values("Set-Cookie"); len(got) != 0 {
		t.Errorf("a wrong token set cookies %q", got)
	}

	login := f.do(f.request(http.MethodGet, "tasks?c="+url.QueryEscape(c)+"&token="+token, nil))
	if login.code != http.StatusSeeOther || login.location != "/tasks?c="+url.QueryEscape(c) {
		t.Fatalf("login link: %d to %q, want 303 to /tasks?c=%s", login.code, login.location, c)
	}
	raw := login.header.Get("Set-Cookie")
	cookies := (&http.Response{Header: login.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login link set %d cookies (%q), want 1", len(cookies), login.header.Values("Set-Cookie"))
	}
	session := cookies[0]
	if !session.HttpOnly || session.SameSite != http.SameSiteLaxMode || session.Path != "/" || session.Secure || strings.Contains(raw, token) {
		t.Fatalf("session cookie %q: want HttpOnly, SameSite=Lax, Path=/, not Secure over plain HTTP, without the token", raw)
	}
	withCookie := func(req *http.Request) *http.Request { req.AddCookie(session); return req }
	f.do(withCookie(f.request(http.MethodGet, login.location, nil))).want(t, "the page after login", 200, "broken-1", `value="retry"`)

	f.do(f.request(http.MethodPost, f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}})).
		want(t, "a POST without credentials", 401, "needs its token")
	forged := &http.Cookie{Name: session.Name, Value: strings.Repeat("0", len(session.Value))}
	req := f.sameOrigin(f.request(http.MethodPost, f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}}))
	req.AddCookie(forged)
	f.do(req).want(t, "a POST with a forged cookie", 401)
	if s := f.status("broken-1"); s != mscheduler.StatusFailed {
		t.Fatalf("a POST without credentials changed the task: %s", s)
	}

	acted := f.do(withCookie(f.sameOrigin(f.request(http.MethodPost, f.taskPath("broken-1"), url.Values{"action": {"retry"}, "seen": {"failed"}}))))
	if acted.code != http.StatusSeeOther || !strings.Contains(acted.location, "done=retry") {
		t.Fatalf("a POST with the session cookie: %d to %q, want 303 with done=retry; body:\n%.1000s", acted.code, acted.location, acted.body)
	}
	if s := f.status("broken-1"); s != mscheduler.StatusPending {
		t.Fatalf("after a retry with the session cookie: %s, want pending", s)
	}
}

// TestLoginLinkKeepsTheRest: the redirect keeps every other parameter as
// sent, and stays on the dashboard whatever the path looks like.
func TestLoginLinkKeepsTheRest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	for link, want := range map[string]string{
		"tasks?c=x&token=" + fixtureToken + "&status=failed&tag=a%20b": "/tasks?c=x&status=failed&tag=a%20b",
		"?token=" + fixtureToken:                "/",
		"//evil.example/?token=" + fixtureToken: "/evil.example/",
	} {
		p := f.do(f.request(http.MethodGet, link, nil))
		if p.code != http.StatusSeeOther || p.location != want {
			t.Errorf("GET /%s: %d to %q, want 303 to %q", strings.TrimPrefix(link, "/"), p.code, p.location, want)
		}
	}
}

// TestLoginUnderAPrefix: mounted with http.StripPrefix, the redirect keeps
// the prefix and the cookie goes to the dashboard's paths alone.
func TestLoginUnderAPrefix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	d, err := dashboard.New(f.coll.Database(), &dashboard.Config{Collections: []string{f.coll.Name()}, Token: fixtureToken})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/jobs/", http.StripPrefix("/jobs", d))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/jobs/task?"+url.Values{"c": {f.coll.Name()}, "key": {"broken-1"}, "token": {fixtureToken}}.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "/jobs/task?c=" + url.QueryEscape(f.coll.Name()) + "&key=broken-1"
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("login under /jobs: %s to %q, want 303 to %q", resp.Status, resp.Header.Get("Location"), want)
	}
	if cookies := resp.Cookies(); len(cookies) != 1 || cookies[0].Path != "/jobs" {
		t.Fatalf("login under /jobs set %q, want one cookie with Path=/jobs", resp.Header.Values("Set-Cookie"))
	}
}
