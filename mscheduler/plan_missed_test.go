package mscheduler_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// planCounts is where a stored plan stands, with its missed count.
type planCounts struct {
	Planned     time.Time `bson:"planned"`
	Start       time.Time `bson:"start"`
	Runs        int       `bson:"runs"`
	Skipped     int       `bson:"skipped"`
	MissedCount int       `bson:"missed_count"`
	SkipNext    int       `bson:"skip_next"`
	Status      string    `bson:"-"`
}

func readCounts(t *testing.T, coll *mongo.Collection, key string) planCounts {
	t.Helper()
	var doc struct {
		Plan   planCounts `bson:"plan"`
		Status string     `bson:"status"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		t.Fatalf("read task %q: %v", key, err)
	}
	doc.Plan.Status = doc.Status
	return doc.Plan
}

// wantCounts checks the stored counts and what Get returns of them.
func wantCounts(t *testing.T, p *mscheduler.Producer[int], coll *mongo.Collection, key string, runs, skipped, missed int) planCounts {
	t.Helper()
	st := readCounts(t, coll, key)
	if st.Runs != runs || st.Skipped != skipped || st.MissedCount != missed {
		t.Fatalf("stored plan %+v: want %d runs, %d skipped, %d missed", st, runs, skipped, missed)
	}
	info, err := p.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Plan == nil || info.Plan.Runs != runs || info.Plan.Skipped != skipped || info.Plan.Missed != missed || info.Problem != "" {
		t.Fatalf("Get: plan %+v, problem %q: want %d runs, %d skipped, %d missed", info.Plan, info.Problem, runs, skipped, missed)
	}
	return st
}

// TestPlanMissedSkipNext: planned times skipped on request (SkipNext) are
// counted as skipped, not missed; in a step that both consumes a pending
// skip and passes over planned times that came and went, only the latter
// are missed.
func TestPlanMissedSkipNext(t *testing.T) {
	coll := mschedulertest.Collection(t)
	clock := &jumpClock{}
	p := newProducer[int](t, coll, clock.producer())
	plan := mscheduler.Every(1, mscheduler.Hour)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.SkipNext(ctxT(t), "k", 2); err != nil {
		t.Fatal(err)
	}
	start := readCounts(t, coll, "k").Start
	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("w", ev)))

	// The first two planned times (start, start+1h) are skipped on request.
	ev.WaitCount(t, mscheduler.EventSkipped, 1)
	if st := wantCounts(t, p, coll, "k", 0, 2, 0); !st.Planned.Equal(start.Add(2*time.Hour)) || st.SkipNext != 0 {
		t.Fatalf("after SkipNext 2: %+v, want planned %s and skip_next spent", st, start.Add(2*time.Hour))
	}
	clock.set(2 * time.Hour)
	ev.WaitFor(t, "the run at start+2h to be recorded", func([]mscheduler.Event) bool { return readCounts(t, coll, "k").Runs == 1 })
	wantCounts(t, p, coll, "k", 1, 2, 0)

	// One skip on request, then the workers are "down" until 5h30 past
	// start: start+3h is skipped on request, start+4h and start+5h were
	// missed, start+6h is next.
	if err := p.SkipNext(ctxT(t), "k", 1); err != nil {
		t.Fatal(err)
	}
	clock.set(5*time.Hour + 30*time.Minute)
	ev.WaitCount(t, mscheduler.EventSkipped, 2)
	if st := wantCounts(t, p, coll, "k", 1, 5, 2); !st.Planned.Equal(start.Add(6 * time.Hour)) {
		t.Fatalf("planned %s, want %s", st.Planned, start.Add(6*time.Hour))
	}
	if planned := log.planned(); len(planned) != 1 || !planned[0].Equal(start.Add(2*time.Hour)) {
		t.Fatalf("ran %v, want only start+2h", planned)
	}
}

// TestPlanMissedWhileNoWorkerRuns: planned times that pass while no worker
// runs the plan are counted as missed: at publish (a Start in the past) and
// at the claim of a late occurrence; the run that follows keeps them.
func TestPlanMissedWhileNoWorkerRuns(t *testing.T) {
	t.Run("publish", func(t *testing.T) {
		t.Parallel()
		coll := mschedulertest.Collection(t)
		p := newProducer[int](t, coll, nil)
		plan := mscheduler.Every(1, mscheduler.Minute)
		plan.Start = time.Now().Add(-(10*time.Minute + 30*time.Second)).Truncate(time.Second)
		if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
			t.Fatal(err)
		}
		// start … start+10m passed (the latest 30 s late, past grace);
		// start+11m is next.
		if st := wantCounts(t, p, coll, "k", 0, 11, 11); !st.Planned.Equal(plan.Start.Add(11 * time.Minute)) {
			t.Fatalf("planned %s, want %s", st.Planned, plan.Start.Add(11*time.Minute))
		}
	})
	// The worker's clock says 10m30s past start when it first claims
	// the plan. Under MissedSkip, start … start+10m were missed and
	// start+11m runs later; under MissedRunOnce, start+10m runs at once
	// in the place of start, and start … start+9m were missed.
	for _, tc := range []struct {
		missed      mscheduler.MissedPolicy
		skipped     int
		runAt, wait time.Duration // from start; wait: the clock for the run after the skip
	}{
		{mscheduler.MissedSkip, 11, 11 * time.Minute, time.Minute + 11*time.Minute + time.Second},
		{mscheduler.MissedRunOnce, 10, 10 * time.Minute, 0},
	} {
		t.Run("claim "+string(tc.missed), func(t *testing.T) {
			t.Parallel()
			coll := mschedulertest.Collection(t)
			clock := &jumpClock{}
			ev := mschedulertest.NewEvents()
			log := &plannedLog{}
			startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("w", ev)))
			p := newProducer[int](t, coll, nil)
			plan := mscheduler.Every(1, mscheduler.Minute)
			plan.Start, plan.Missed = time.Now().Add(time.Minute).Truncate(time.Second), tc.missed
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
				t.Fatal(err)
			}
			skipped := tc.skipped
			clock.set(time.Minute + 10*time.Minute + 30*time.Second)
			ev.WaitCount(t, mscheduler.EventSkipped, 1)
			if tc.wait > 0 { // the plan waits for its next planned time
				wantCounts(t, p, coll, "k", 0, skipped, skipped)
				clock.set(tc.wait)
			}
			ev.WaitFor(t, "the run to be recorded", func([]mscheduler.Event) bool { return readCounts(t, coll, "k").Runs == 1 })
			st := wantCounts(t, p, coll, "k", 1, skipped, skipped)
			if planned := log.planned(); len(planned) != 1 || !planned[0].Equal(plan.Start.Add(tc.runAt)) || st.Skipped < st.MissedCount {
				t.Fatalf("ran %v, plan %+v: want one run at %s", planned, st, plan.Start.Add(tc.runAt))
			}
		})
	}
}

// TestPlanMissedOverrun: planned times that come while a run is going and
// are skipped by the overrun policy are missed, both when the run end moves
// the plan on and when it finishes it.
func TestPlanMissedOverrun(t *testing.T) {
	cases := []struct {
		name   string
		repeat int
		status string
	}{
		{"run end moves on", mscheduler.RepeatForever, "pending"},
		// Start, +10s and +20s are all its planned times: the run end
		// finds the last two missed and finishes the plan.
		{"run end finishes", 3, "finished"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			coll := mschedulertest.Collection(t)
			clock := &jumpClock{}
			ev := mschedulertest.NewEvents()
			started, release := make(chan time.Time, 1), make(chan struct{})
			startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
				select {
				case started <- task.Run.PlannedAt:
					<-release // the first run only
				default:
				}
				return 0, nil
			}, clock.config(fastConfig("w", ev)))
			p := newProducer[int](t, coll, nil)
			plan := mscheduler.Every(10, mscheduler.Second)
			plan.Repeat = tc.repeat
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
				t.Fatal(err)
			}
			var planned time.Time
			select {
			case planned = <-started:
			case <-time.After(waitTimeout):
				t.Fatal("the first run did not start")
			}
			// During the run the worker's clock moves 26 s (less than
			// the claim's lease, 30 s): +10s and +20s come during it,
			// the latter 6 s late at its end, past grace: both missed.
			clock.set(26 * time.Second)
			close(release)
			ev.WaitFor(t, "the run to be recorded", func([]mscheduler.Event) bool { return readCounts(t, coll, "k").Runs == 1 })
			clock.set(0) // +30s is 30 s away again: no run comes before the checks
			st := wantCounts(t, p, coll, "k", 1, 2, 2)
			if st.Status != tc.status || (tc.status == "pending" && !st.Planned.Equal(planned.Add(30*time.Second))) {
				t.Fatalf("plan %+v: want %s (planned %s)", st, tc.status, planned.Add(30*time.Second))
			}
		})
	}
}

// TestPlanMissedWhilePaused: the planned times that pass while a plan is
// paused are missed; a plan stored before missed_count was kept (no field)
// reads as 0 missed and counts on from there.
func TestPlanMissedWhilePaused(t *testing.T) {
	coll := mschedulertest.Collection(t)
	clock := &jumpClock{}
	p := newProducer[int](t, coll, clock.producer())
	plan := mscheduler.Every(10, mscheduler.Second)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := coll.UpdateOne(ctxT(t), bson.D{{Key: "_id", Value: "k"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "plan.missed_count", Value: ""}}}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("unset missed_count: %v", err)
	}
	wantCounts(t, p, coll, "k", 0, 0, 0)
	if err := p.Pause(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	start := readCounts(t, coll, "k").Start
	// Less than the producer's clock sync interval (a minute), so that it
	// keeps its measure of the server clock and sees the jump.
	clock.set(45 * time.Second)
	if err := p.Resume(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	// start … start+40s passed while paused; start+50s is next.
	if st := wantCounts(t, p, coll, "k", 0, 5, 5); !st.Planned.Equal(start.Add(50 * time.Second)) {
		t.Fatalf("planned %s, want %s", st.Planned, start.Add(50*time.Second))
	}
}
