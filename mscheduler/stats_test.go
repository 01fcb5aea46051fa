package mscheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestStats: tasks are counted by status; the oldest due task is the one
// that could be claimed now (not paused, not every slot running, not due
// later); the last hour's runs and failures come from the history.
func TestStats(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[string]{
		{Key: "ok", Params: "ok"},
		{Key: "fails", Params: "fail", MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1},
	}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	c := startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "fail" {
			return "", errors.New("it failed")
		}
		return "done", nil
	}, fastConfig("w", ev))
	waitHistory(t, coll, "ok", 1)
	waitHistory(t, coll, "fails", 1)
	if err := c.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	now := time.Now().Truncate(time.Millisecond)
	if _, err := p.PublishMany(ctxT(t), []mscheduler.Task[string]{
		{Key: "busy", RunAt: now.Add(-3 * time.Hour)},
		{Key: "paused", RunAt: now.Add(-2 * time.Hour)},
		{Key: "due", RunAt: now.Add(-time.Hour)},
		{Key: "later", RunAt: now.Add(time.Hour)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctxT(t), "paused"); err != nil {
		t.Fatal(err)
	}
	setFields(t, coll, "busy", bson.D{{Key: "status", Value: "running"}, {Key: "running", Value: 1}, {Key: "free", Value: 0}})

	s, err := p.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[mscheduler.Status]int64{
		mscheduler.StatusPending: 3, mscheduler.StatusRunning: 1, mscheduler.StatusSucceeded: 1, mscheduler.StatusFailed: 1,
		mscheduler.StatusFinished: 0, mscheduler.StatusCancelled: 0, mscheduler.StatusInvalid: 0,
	}
	for status, n := range want {
		if s.ByStatus[status] != n {
			t.Errorf("ByStatus[%s] = %d, want %d (all: %v)", status, s.ByStatus[status], n, s.ByStatus)
		}
	}
	if !s.OldestDue.Equal(now.Add(-time.Hour)) {
		t.Errorf("OldestDue = %v, want the run_at of \"due\", %v", s.OldestDue, now.Add(-time.Hour))
	}
	if s.Due != 1 {
		t.Errorf("Due = %d, want 1: only \"due\" is claimable now (busy has no free slot, paused is paused, later is not due)", s.Due)
	}
	if s.RunsLastHour != 2 || s.FailuresLastHour != 1 {
		t.Errorf("last hour: %d runs, %d failures; want 2 and 1", s.RunsLastHour, s.FailuresLastHour)
	}
	if d := time.Since(s.At); d < -time.Minute || d > time.Minute {
		t.Errorf("At = %v, not the server's present", s.At)
	}
}

// TestStatsQueriesAreBounded: every query of Stats on the tasks and their
// history carries maxTimeMS, so that a count on a large collection cannot
// load the server for long.
func TestStatsQueriesAreBounded(t *testing.T) {
	coll := mschedulertest.Collection(t)
	var mu sync.Mutex
	var counting bool
	var queries, bounded int
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		if !counting {
			return
		}
		switch target, _ := e.Command.Lookup(e.CommandName).StringValueOK(); target {
		case coll.Name(), coll.Name() + ".runs":
		default:
			return
		}
		queries++
		if v, err := e.Command.LookupErr("maxTimeMS"); err == nil {
			if ms, ok := v.AsInt64OK(); ok && ms > 0 && ms <= mscheduler.StatsTimeout.Milliseconds() {
				bounded++
			}
		}
	}}
	own := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor)).Database(coll.Database().Name()).Collection(coll.Name())
	p := newProducer[int](t, own, nil)
	mu.Lock()
	counting = true
	mu.Unlock()
	if _, err := p.Stats(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if queries == 0 || bounded != queries {
		t.Errorf("%d of %d queries carry a maxTimeMS within StatsTimeout", bounded, queries)
	}
}
