package mscheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestPublishPlanStoresItReadably: a published plan is stored with its
// definition in plain fields and its first planned time as run_at.
func TestPublishPlanStoresItReadably(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	weekly := mscheduler.Weekly(time.Monday, 9, 30)
	weekly.Zone = "Europe/Berlin"
	every := mscheduler.Every(5, mscheduler.Minute)
	past := mscheduler.Once(time.Now().Add(-time.Hour))
	pastCatchUp := past
	pastCatchUp.Missed = mscheduler.MissedCatchUp
	before := time.Now().Add(-time.Second)
	_, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{
		{Key: "weekly", Plan: &weekly}, {Key: "every", Plan: &every},
		{Key: "past", Plan: &past}, {Key: "past-catch-up", Plan: &pastCatchUp},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		RunAt time.Time `bson:"run_at"`
		Plan  bson.M    `bson:"plan"`
	}
	if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "weekly"}}).Decode(&w); err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	local := w.RunAt.In(berlin)
	if w.Plan["kind"] != "weekly" || w.Plan["weekday"] != int32(1) || w.Plan["time"] != "09:30:00" || w.Plan["zone"] != "Europe/Berlin" ||
		w.Plan["missed"] != "skip" || w.Plan["repeat"] != int32(-1) || local.Weekday() != time.Monday || local.Hour() != 9 || local.Minute() != 30 ||
		w.RunAt.Before(before) || w.RunAt.After(time.Now().Add(8*24*time.Hour)) {
		t.Fatalf("weekly task: run_at %s (%s), plan %v", w.RunAt, local, w.Plan)
	}

	st, status := readPlan(t, coll, "every")
	if status != "pending" || st.Start.Before(before) || !st.Planned.Equal(st.Start) || readTask(t, coll, "every").RunAt != st.Planned {
		t.Fatalf("every task: status %s, plan %+v: want its first planned time at its start, the publish time", status, st)
	}
	if st, status := readPlan(t, coll, "past"); status != "finished" || st.Skipped != 1 || st.Runs != 0 {
		t.Fatalf("once plan an hour late under skip: status %s, plan %+v; want finished, 1 skipped", status, st)
	}
	if st, status := readPlan(t, coll, "past-catch-up"); status != "pending" || !st.Planned.Equal(past.At.Truncate(time.Millisecond)) {
		t.Fatalf("once plan an hour late under catch-up: status %s, plan %+v; want pending at its time", status, st)
	}
}

func TestPublishRefusesBadPlansAndWritesNothing(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	now := time.Now()
	with := func(pl mscheduler.Plan, edit func(*mscheduler.Plan)) *mscheduler.Plan { edit(&pl); return &pl }
	cases := []struct {
		name  string
		task  mscheduler.Task[int]
		field string
	}{
		{"every 0", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(0, mscheduler.Second), func(*mscheduler.Plan) {})}, "Plan.Every"},
		{"every 32767", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(32767, mscheduler.Second), func(*mscheduler.Plan) {})}, "Plan.Every"},
		{"unknown unit", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(1, "week"), func(*mscheduler.Plan) {})}, "Plan.Unit"},
		{"unknown zone", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Weekly(1, 9, 0), func(p *mscheduler.Plan) { p.Zone = "Mars/Olympus" })}, "Plan.Zone"},
		{"bad cron", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Cron("61 * * * *"), func(*mscheduler.Plan) {})}, "Plan.Cron"},
		{"cron with 4 fields", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Cron("* * * *"), func(*mscheduler.Plan) {})}, "Plan.Cron"},
		{"end before start", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(1, mscheduler.Hour), func(p *mscheduler.Plan) {
			p.Start, p.End = now.Add(time.Hour), now
		})}, "Plan.End"},
		{"end in the past", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(1, mscheduler.Hour), func(p *mscheduler.Plan) { p.End = now.Add(-time.Hour) })}, "Plan.End"},
		{"repeat -2", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(1, mscheduler.Hour), func(p *mscheduler.Plan) { p.Repeat = -2 })}, "Plan.Repeat"},
		{"day 32", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Monthly(32, 0, 0), func(*mscheduler.Plan) {})}, "Plan.Day"},
		{"hour 24", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Monthly(1, 24, 0), func(*mscheduler.Plan) {})}, "Plan.Time"},
		{"start in 1700", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Every(1, mscheduler.Hour), func(p *mscheduler.Plan) {
			p.Start = time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
		})}, "Plan.Start"},
		{"cron that never matches", mscheduler.Task[int]{Key: "k", Plan: with(mscheduler.Cron("0 0 30 2 *"), func(*mscheduler.Plan) {})}, "Plan.Cron"},
		{"run_at with a plan", mscheduler.Task[int]{Key: "k", RunAt: now, Plan: with(mscheduler.Every(1, mscheduler.Hour), func(*mscheduler.Plan) {})}, "RunAt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Publish(ctxT(t), c.task, nil)
			wantInvalid(t, err, c.field)
		})
	}
	_, err := p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "ok"}, {Key: "bad", Plan: with(mscheduler.Every(0, mscheduler.Minute), func(*mscheduler.Plan) {})}}, nil)
	wantInvalid(t, err, "tasks[1].Plan.Every")
	_, err = p.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "ok"}, {Key: "planned", Plan: with(mscheduler.Every(1, mscheduler.Minute), func(*mscheduler.Plan) {})}},
		&mscheduler.PublishOpts{MoveRunAt: true})
	wantInvalid(t, err, "tasks[1].Plan")
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("documents = %d after refused publishes, want 0", n)
	}
}

// TestHandEditedBadPlanIsSetInvalid: a plan broken by hand in the collection
// is set invalid when claimed, with the stored field named.
func TestHandEditedBadPlanIsSetInvalid(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Cron("* * * * * *")
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan, MaxRetries: mscheduler.NoRetries}, nil); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "k", bson.D{{Key: "plan.cron", Value: "every full moon"}})
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("w", ev))
	ev.WaitCount(t, mscheduler.EventInvalid, 1)
	for _, e := range ev.Snapshot() {
		if e.Kind == mscheduler.EventInvalid && (e.Err == nil || !strings.Contains(e.Err.Error(), "plan.cron")) {
			t.Fatalf("invalid event error = %v, want it to name plan.cron", e.Err)
		}
	}
	if n := ev.Count(mscheduler.EventSucceeded); n != 0 {
		t.Fatalf("%d runs succeeded with a broken plan", n)
	}
	var doc struct {
		Status  string `bson:"status"`
		Invalid struct {
			Field string `bson:"field"`
		} `bson:"invalid"`
	}
	if err := coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil || doc.Status != "invalid" || doc.Invalid.Field != "plan.cron" {
		t.Fatalf("task = %+v (%v), want invalid on plan.cron", doc, err)
	}
}
