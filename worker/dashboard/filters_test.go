package dashboard_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// order fails the test unless the keys appear in the page in this order.
func (p page) order(t *testing.T, what string, keys ...string) {
	t.Helper()
	last := -1
	for _, k := range keys {
		i := strings.Index(p.body, ">"+k+"</a>")
		if i < 0 {
			t.Errorf("%s: %s is not listed", what, k)
			return
		}
		if i < last {
			t.Errorf("%s: %s is listed out of the order %v", what, k, keys)
		}
		last = i
	}
}

// lacks fails the test if the page lists any of the keys.
func (p page) lacks(t *testing.T, what string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if strings.Contains(p.body, ">"+k+"</a>") {
			t.Errorf("%s: %s is listed", what, k)
		}
	}
}

// TestListFiltersAndSorts: the task list filters by group and by a range
// of next run times, sorts by next run and in the claim order, pages under
// a sort, and names a bad value.
func TestListFiltersAndSorts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	now := time.Now().UTC()
	if _, err := f.producer.PublishMany(t.Context(), []mscheduler.Task[email]{
		{Key: "blue-urgent", Group: "blue", Priority: 5, RunAt: now.Add(2 * time.Hour)},
		{Key: "blue-soon", Group: "blue", Priority: 1, RunAt: now.Add(30 * time.Minute)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	list := func(q url.Values) page {
		q.Set("c", f.coll.Name())
		return f.get("tasks?" + q.Encode())
	}
	byGroup := list(url.Values{"group": {"blue"}})
	byGroup.want(t, "by group", 200, `name="group" value="blue"`)
	byGroup.order(t, "by group", "blue-soon", "blue-urgent")
	byGroup.lacks(t, "by group", "later-1", "welcome-1")

	list(url.Values{"status": {"pending"}, "sort": {"run_at"}}).order(t, "by next run", "blue-soon", "later-1", "blue-urgent")
	list(url.Values{"status": {"pending"}, "sort": {"priority"}}).order(t, "claim order", "blue-urgent", "blue-soon", "later-1")

	form := func(t time.Time) string { return t.Format("2006-01-02T15:04:05") }
	window := list(url.Values{"from": {form(now.Add(45 * time.Minute))}, "before": {form(now.Add(90 * time.Minute))}})
	window.want(t, "next run window", 200, "later-1")
	window.lacks(t, "next run window", "blue-soon", "blue-urgent", "welcome-1", "broken-1")

	first := list(url.Values{"status": {"pending"}, "sort": {"run_at"}, "limit": {"1"}})
	first.want(t, "first page by next run", 200, "after=blue-soon", "sort=run_at")
	second := list(url.Values{"status": {"pending"}, "sort": {"run_at"}, "limit": {"1"}, "after": {"blue-soon"}})
	second.want(t, "second page by next run", 200, "later-1")
	second.lacks(t, "second page by next run", "blue-soon", "blue-urgent")

	list(url.Values{"sort": {"age"}}).want(t, "bad sort", 400, "Bad filter: sort &#34;age&#34;")
	list(url.Values{"from": {"yesterday"}}).want(t, "bad time", 400, "from &#34;yesterday&#34; is not a time")
	list(url.Values{"from": {"2026-01-02T00:00"}, "before": {"2026-01-01T00:00"}}).want(t, "empty window", 400, "before &#34;2026-01-01T00:00&#34; must be later than from")
	if err := f.producer.Delete(t.Context(), "blue-soon", nil); err != nil {
		t.Fatal(err)
	}
	list(url.Values{"sort": {"run_at"}, "after": {"blue-soon"}}).want(t, "page after a deleted task", 404, "is gone: start again from the first page")
}
