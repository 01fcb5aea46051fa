package mscheduler_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// listFixture is 28 tasks due later, with ties on run_at (5 distinct
// times) and on priority (3 values), in an order unlike their keys'.
type listFixture struct {
	p     *mscheduler.Producer[int]
	coll  *mongo.Collection
	t0    time.Time
	tasks []mscheduler.Task[int]
}

const listFixtureSize = 28

func newListFixture(t *testing.T) *listFixture {
	t.Helper()
	coll := mschedulertest.Collection(t)
	f := &listFixture{p: newProducer[int](t, coll, nil), coll: coll, t0: time.Now().Add(time.Hour).Truncate(time.Second)}
	for i := range listFixtureSize {
		task := mscheduler.Task[int]{
			Key:      fmt.Sprintf("t%02d", i),
			RunAt:    f.t0.Add(time.Duration((i*7)%5) * time.Minute),
			Priority: (i * 5) % 3,
		}
		switch i % 4 {
		case 0:
			task.Group = "g1"
		case 1:
			task.Group = "g2"
		}
		f.tasks = append(f.tasks, task)
	}
	if _, err := f.p.PublishMany(ctxT(t), f.tasks, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// want lists the keys of the fixture's tasks that keep selects, in order.
func (f *listFixture) want(keep func(mscheduler.Task[int]) bool, order func(a, b mscheduler.Task[int]) int) []string {
	tasks := slices.Clone(f.tasks)
	slices.SortFunc(tasks, order)
	var out []string
	for _, task := range tasks {
		if keep == nil || keep(task) {
			out = append(out, task.Key)
		}
	}
	return out
}

func byKey(a, b mscheduler.Task[int]) int { return strings.Compare(a.Key, b.Key) }

func byRunAt(a, b mscheduler.Task[int]) int {
	return cmp.Or(a.RunAt.Compare(b.RunAt), strings.Compare(a.Key, b.Key))
}

func byPriority(a, b mscheduler.Task[int]) int {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), byRunAt(a, b))
}

func listKeys(t *testing.T, p *mscheduler.Producer[int], opts mscheduler.ListOpts) []string {
	t.Helper()
	list, err := p.List(ctxT(t), opts)
	if err != nil {
		t.Fatalf("List(%+v): %v", opts, err)
	}
	out := []string{}
	for _, ti := range list {
		out = append(out, ti.Task.Key)
	}
	return out
}

// listAll pages through the list, limit tasks at a time, After the last
// key of each page.
func listAll(t *testing.T, p *mscheduler.Producer[int], opts mscheduler.ListOpts, limit int) []string {
	t.Helper()
	opts.Limit = limit
	out := []string{}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("paging does not end: %q", out)
		}
		page := listKeys(t, p, opts)
		out = append(out, page...)
		if len(page) < limit {
			return out
		}
		opts.After = page[len(page)-1]
	}
}

func TestListFilterGroupAndRunAt(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	at := func(m int) time.Time { return f.t0.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		name string
		opts mscheduler.ListOpts
		keep func(mscheduler.Task[int]) bool
	}{
		{"group", mscheduler.ListOpts{Group: "g1"}, func(t mscheduler.Task[int]) bool { return t.Group == "g1" }},
		{"unknown group", mscheduler.ListOpts{Group: "nobody"}, func(mscheduler.Task[int]) bool { return false }},
		// From is included: the tasks at exactly t0+1m are listed.
		{"from", mscheduler.ListOpts{RunAtFrom: at(1)}, func(t mscheduler.Task[int]) bool { return !t.RunAt.Before(at(1)) }},
		// Before is not: the tasks at exactly t0+3m are not.
		{"before", mscheduler.ListOpts{RunAtBefore: at(3)}, func(t mscheduler.Task[int]) bool { return t.RunAt.Before(at(3)) }},
		{"from and before", mscheduler.ListOpts{RunAtFrom: at(1), RunAtBefore: at(3)}, func(t mscheduler.Task[int]) bool {
			return !t.RunAt.Before(at(1)) && t.RunAt.Before(at(3))
		}},
		{"one instant", mscheduler.ListOpts{RunAtFrom: at(2), RunAtBefore: at(2).Add(time.Millisecond)}, func(t mscheduler.Task[int]) bool {
			return t.RunAt.Equal(at(2))
		}},
		{"group and range", mscheduler.ListOpts{Group: "g2", RunAtFrom: at(2)}, func(t mscheduler.Task[int]) bool {
			return t.Group == "g2" && !t.RunAt.Before(at(2))
		}},
		{"group, status and key prefix", mscheduler.ListOpts{Group: "g1", Statuses: []mscheduler.Status{mscheduler.StatusPending}, KeyPrefix: "t1"}, func(t mscheduler.Task[int]) bool {
			return t.Group == "g1" && strings.HasPrefix(t.Key, "t1")
		}},
	}
	for _, tc := range cases {
		for _, sort := range []mscheduler.ListSort{mscheduler.SortByKey, mscheduler.SortByRunAt, mscheduler.SortByPriority} {
			opts := tc.opts
			opts.Sort = sort
			order := map[mscheduler.ListSort]func(a, b mscheduler.Task[int]) int{
				mscheduler.SortByKey: byKey, mscheduler.SortByRunAt: byRunAt, mscheduler.SortByPriority: byPriority,
			}[sort]
			want := f.want(tc.keep, order)
			if want == nil {
				want = []string{}
			}
			if got := listKeys(t, f.p, opts); !slices.Equal(got, want) {
				t.Errorf("%s, sort %q: %q, want %q", tc.name, sort, got, want)
			}
			if got := listAll(t, f.p, opts, 3); !slices.Equal(got, want) {
				t.Errorf("%s, sort %q, 3 a page: %q, want %q", tc.name, sort, got, want)
			}
		}
	}
}

// Stored times are whole milliseconds: a bound with a fraction of one
// still includes (From) or excludes (Before) exactly what it says.
func TestListRunAtSubMillisecondBounds(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	x := time.Now().Add(time.Hour).Truncate(time.Second)
	tasks := []mscheduler.Task[int]{{Key: "early", RunAt: x.Add(-time.Millisecond)}, {Key: "on", RunAt: x}}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	half := x.Add(-500 * time.Microsecond) // after "early", before "on"
	if got := listKeys(t, p, mscheduler.ListOpts{RunAtFrom: half}); !slices.Equal(got, []string{"on"}) {
		t.Errorf("from %s: %q, want [on]", half.Format(time.RFC3339Nano), got)
	}
	if got := listKeys(t, p, mscheduler.ListOpts{RunAtBefore: half}); !slices.Equal(got, []string{"early"}) {
		t.Errorf("before %s: %q, want [early]", half.Format(time.RFC3339Nano), got)
	}
}

// TestListSortPaging: under each order, the whole list and pages of 4 (and
// of 1 and 5, across the ties) visit every task once, in order.
func TestListSortPaging(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	for _, tc := range []struct {
		sort  mscheduler.ListSort
		order func(a, b mscheduler.Task[int]) int
	}{
		{mscheduler.SortByKey, byKey},
		{mscheduler.SortByRunAt, byRunAt},
		{mscheduler.SortByPriority, byPriority},
	} {
		want := f.want(nil, tc.order)
		if got := listKeys(t, f.p, mscheduler.ListOpts{Sort: tc.sort}); !slices.Equal(got, want) {
			t.Errorf("sort %q: %q, want %q", tc.sort, got, want)
		}
		for _, limit := range []int{4, 1, 5} {
			if got := listAll(t, f.p, mscheduler.ListOpts{Sort: tc.sort}, limit); !slices.Equal(got, want) {
				t.Errorf("sort %q, %d a page: %q, want %q", tc.sort, limit, got, want)
			}
		}
	}
	// The orders differ from each other, and ties exist: the test is not
	// vacuous.
	if slices.Equal(f.want(nil, byRunAt), f.want(nil, byPriority)) || slices.Equal(f.want(nil, byKey), f.want(nil, byRunAt)) {
		t.Fatal("the fixture's orders are alike")
	}
}

// TestListSortPagingHandEdited: documents edited by hand with a missing,
// null or mistyped priority or run_at are paged through like the others:
// pages visit every task once, in the server's own order.
func TestListSortPagingHandEdited(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	edits := []struct {
		key  string
		edit bson.D
	}{
		{"t03", bson.D{{Key: "$unset", Value: bson.D{{Key: "priority", Value: ""}}}}},
		{"t04", bson.D{{Key: "$unset", Value: bson.D{{Key: "priority", Value: ""}}}}},
		{"t05", bson.D{{Key: "$set", Value: bson.D{{Key: "priority", Value: nil}}}}},
		{"t06", bson.D{{Key: "$set", Value: bson.D{{Key: "priority", Value: "9"}}}}},
		{"t07", bson.D{{Key: "$set", Value: bson.D{{Key: "priority", Value: 1.5}}}}},
		{"t08", bson.D{{Key: "$set", Value: bson.D{{Key: "priority", Value: int64(2)}}}}},
		{"t09", bson.D{{Key: "$unset", Value: bson.D{{Key: "run_at", Value: ""}}}}},
		{"t10", bson.D{{Key: "$set", Value: bson.D{{Key: "run_at", Value: "tomorrow"}}}}},
		{"t11", bson.D{{Key: "$set", Value: bson.D{{Key: "run_at", Value: true}}}}},
		{"t12", bson.D{{Key: "$set", Value: bson.D{{Key: "run_at", Value: nil}, {Key: "priority", Value: "9"}}}}},
	}
	for _, e := range edits {
		if res, err := f.coll.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: e.key}}, e.edit); err != nil || res.MatchedCount != 1 {
			t.Fatalf("edit %s: %v", e.key, err)
		}
	}
	for _, sort := range []mscheduler.ListSort{mscheduler.SortByRunAt, mscheduler.SortByPriority} {
		whole := listKeys(t, f.p, mscheduler.ListOpts{Sort: sort})
		if len(whole) != listFixtureSize {
			t.Fatalf("sort %q: %d tasks, want %d", sort, len(whole), listFixtureSize)
		}
		for _, limit := range []int{1, 4} {
			if got := listAll(t, f.p, mscheduler.ListOpts{Sort: sort}, limit); !slices.Equal(got, whole) {
				t.Errorf("sort %q, %d a page:\n%q, want\n%q", sort, limit, got, whole)
			}
		}
	}
}

// TestListSortWithFilters: the sort orders combine with the filters, and
// paging goes on from a task the filter no longer selects.
func TestListSortWithFilters(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	for _, key := range []string{"t01", "t02", "t05"} {
		if err := f.p.Cancel(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.p.Pause(ctxT(t), "t07"); err != nil {
		t.Fatal(err)
	}
	cancelled := func(k string) bool { return k == "t01" || k == "t02" || k == "t05" }
	pending := func(t mscheduler.Task[int]) bool { return !cancelled(t.Key) }
	opts := mscheduler.ListOpts{Sort: mscheduler.SortByPriority, Statuses: []mscheduler.Status{mscheduler.StatusPending}}
	want := f.want(pending, byPriority)
	if got := listAll(t, f.p, opts, 4); !slices.Equal(got, want) {
		t.Errorf("pending by priority, 4 a page: %q, want %q", got, want)
	}
	opts = mscheduler.ListOpts{Sort: mscheduler.SortByRunAt, Statuses: []mscheduler.Status{mscheduler.StatusCancelled}}
	want = f.want(func(t mscheduler.Task[int]) bool { return cancelled(t.Key) }, byRunAt)
	if got := listAll(t, f.p, opts, 2); !slices.Equal(got, want) {
		t.Errorf("cancelled by run_at, 2 a page: %q, want %q", got, want)
	}
	if got := listKeys(t, f.p, mscheduler.ListOpts{Paused: true, Sort: mscheduler.SortByRunAt}); !slices.Equal(got, []string{"t07"}) {
		t.Errorf("paused: %q", got)
	}
	// After names a task the filter does not select: the page goes on
	// from where it sorts.
	all := f.want(nil, byRunAt)
	i := slices.Index(all, "t01")
	opts = mscheduler.ListOpts{Sort: mscheduler.SortByRunAt, Statuses: []mscheduler.Status{mscheduler.StatusPending}, After: "t01"}
	want = slices.DeleteFunc(slices.Clone(all[i+1:]), cancelled)
	if got := listKeys(t, f.p, opts); !slices.Equal(got, want) {
		t.Errorf("pending by run_at after cancelled t01: %q, want %q", got, want)
	}
}

func TestListInvalidOptions(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	// A cancelled context: an option refused before any query says so,
	// not that the context ended.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Now()
	for _, tc := range []struct {
		opts  mscheduler.ListOpts
		field string
	}{
		{mscheduler.ListOpts{Sort: "due"}, "Sort"},
		{mscheduler.ListOpts{Sort: "key"}, "Sort"},
		{mscheduler.ListOpts{RunAtFrom: now, RunAtBefore: now}, "RunAtBefore"},
		{mscheduler.ListOpts{RunAtFrom: now, RunAtBefore: now.Add(-time.Second), Sort: mscheduler.SortByRunAt}, "RunAtBefore"},
	} {
		_, err := p.List(ctx, tc.opts)
		wantInvalid(t, err, tc.field)
	}
	// Either bound alone is fine.
	for _, opts := range []mscheduler.ListOpts{{RunAtFrom: now}, {RunAtBefore: now}} {
		if _, err := p.List(ctxT(t), opts); err != nil {
			t.Errorf("List(%+v): %v", opts, err)
		}
	}
}

// TestListAfterDeletedTask: under a sort by run_at or priority, After names
// a task deleted since the previous page: List says to start again. By
// key, paging goes on (the key itself is the position).
func TestListAfterDeletedTask(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	for _, sort := range []mscheduler.ListSort{mscheduler.SortByRunAt, mscheduler.SortByPriority} {
		page := listKeys(t, f.p, mscheduler.ListOpts{Sort: sort, Limit: 4})
		last := page[len(page)-1]
		if err := f.p.Delete(ctxT(t), last, nil); err != nil {
			t.Fatal(err)
		}
		_, err := f.p.List(ctxT(t), mscheduler.ListOpts{Sort: sort, Limit: 4, After: last})
		if !errors.Is(err, mscheduler.ErrNotFound) || !strings.Contains(err.Error(), "first page") || !strings.Contains(err.Error(), last) {
			t.Errorf("sort %q, After deleted %s: %v, want ErrNotFound saying to start from the first page", sort, last, err)
		}
	}
	page := listKeys(t, f.p, mscheduler.ListOpts{Limit: 4})
	if err := f.p.Delete(ctxT(t), page[3], nil); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, f.p, mscheduler.ListOpts{Limit: 2, After: page[3]}); len(got) != 2 || got[0] <= page[3] {
		t.Errorf("by key after deleted %s: %q", page[3], got)
	}
}

// List tasks in the claim order, two a page.
func ExampleProducer_List_sortByPriority() {
	ctx := context.Background()
	coll := mschedulertest.Client().Database(mschedulertest.Database).Collection("example_list_sort")
	defer coll.Drop(ctx)
	producer, err := mscheduler.NewProducer[int](coll, nil)
	if err != nil {
		panic(err)
	}
	at := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	if _, err := producer.PublishMany(ctx, []mscheduler.Task[int]{
		{Key: "backup", RunAt: at.Add(time.Hour)},
		{Key: "invoice", RunAt: at, Priority: 5},
		{Key: "report", RunAt: at},
	}, nil); err != nil {
		panic(err)
	}
	opts := mscheduler.ListOpts{Sort: mscheduler.SortByPriority, Limit: 2}
	for {
		page, err := producer.List(ctx, opts)
		if err != nil {
			panic(err)
		}
		for _, t := range page {
			fmt.Println(t.Task.Key, t.Task.Priority, t.Task.RunAt.Format("15:04"))
		}
		if len(page) < opts.Limit {
			break
		}
		opts.After = page[len(page)-1].Task.Key
	}
	// Output:
	// invoice 5 09:00
	// report 0 09:00
	// backup 0 10:00
}
