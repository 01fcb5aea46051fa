package mscheduler_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// plannedLog records the planned time of every run a handler saw.
type plannedLog struct {
	mu   sync.Mutex
	runs []plannedRun
}

type plannedRun struct {
	planned time.Time
	worker  string
	runID   string
}

func (l *plannedLog) add(task *mscheduler.Task[int]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, plannedRun{task.Run.PlannedAt, task.Run.WorkerID, task.Run.ID})
}

func (l *plannedLog) planned() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Time, len(l.runs))
	for i, r := range l.runs {
		out[i] = r.planned
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

type storedPlan struct {
	Planned  time.Time `bson:"planned"`
	Runs     int       `bson:"runs"`
	Skipped  int       `bson:"skipped"`
	SkipNext int       `bson:"skip_next"`
	// MissedCount is the part of Skipped that was missed.
	MissedCount int       `bson:"missed_count"`
	Start       time.Time `bson:"start"`
}

func readPlan(t *testing.T, coll *mongo.Collection, key string) (storedPlan, string) {
	t.Helper()
	var doc struct {
		Plan   storedPlan `bson:"plan"`
		Status string     `bson:"status"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		t.Fatalf("read task %q: %v", key, err)
	}
	return doc.Plan, doc.Status
}

func recordingHandler(log *plannedLog, d time.Duration) mscheduler.Handler[int, int] {
	return func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		if task.Plan != nil {
			log.add(task)
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return 0, nil
	}
}

// TestPlanEverySecondEightWorkers: 8 workers and an every-second plan for
// 20 s: every planned time runs at most once, each run receives its planned
// time, and every planned time that passed either ran or was counted as
// skipped.
func TestPlanEverySecondEightWorkers(t *testing.T) {
	const workers, runs = 8, 20
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Second)
	plan.Repeat = runs
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "tick", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	start, _ := readPlan(t, coll, "tick")
	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	for w := range workers {
		startConsumer(t, mschedulertest.CollectionOf(t, mschedulertest.NewClient(t)), recordingHandler(log, 10*time.Millisecond), fastConfig(workerName(w), ev))
	}
	ev.WaitFor(t, "the plan to finish", func([]mscheduler.Event) bool {
		_, status := readPlan(t, coll, "tick")
		return status == "finished"
	})
	final, _ := readPlan(t, coll, "tick")
	planned := log.planned()
	if len(planned) != runs || final.Runs != runs {
		t.Fatalf("handler saw %d runs, plan counts %d, want %d", len(planned), final.Runs, runs)
	}
	for i, pt := range planned {
		if i > 0 && !pt.After(planned[i-1]) {
			t.Fatalf("planned time %s ran twice", pt)
		}
		if off := pt.Sub(start.Start); off%time.Second != 0 || off < 0 {
			t.Fatalf("planned time %s is off the plan's grid from %s", pt, start.Start)
		}
	}
	last := planned[len(planned)-1]
	if grid := int(last.Sub(start.Start)/time.Second) + 1; grid != runs+final.Skipped {
		t.Fatalf("%d planned times up to the last run, but %d ran and %d were skipped", grid, runs, final.Skipped)
	}
	t.Logf("%d runs, %d skipped, over %s", runs, final.Skipped, last.Sub(start.Start))
}

func workerName(i int) string { return "w" + string(rune('a'+i)) }

// TestPlanWorkerKilledMidRun: 8 workers on an every-second plan; the worker
// process running the first planned time is SIGKILLed and replaced. Its
// lease lapses, another worker runs that planned time again (at least
// once), and no planned time succeeds twice.
func TestPlanWorkerKilledMidRun(t *testing.T) {
	const runs, workers = 20, 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Second)
	plan.Repeat = runs
	task := mscheduler.Task[int]{Key: "k", Plan: &plan, PingInterval: 100 * time.Millisecond, WorkerTimeout: 700 * time.Millisecond}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	cmd, started := startCrashWorker(t, coll)
	deadPlanned := started.planned

	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	startWorker := func(i int) {
		cfg := fastConfig(workerName(i), ev)
		cfg.SweepInterval = 100 * time.Millisecond
		cfg.RunsKept = 2 * runs // every record is checked
		startConsumer(t, mschedulertest.CollectionOf(t, mschedulertest.NewClient(t)), recordingHandler(log, 10*time.Millisecond), cfg)
	}
	for i := range workers - 1 {
		startWorker(i)
	}
	waitForLeaseRenewal(t, coll, "k", "doomed")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	startWorker(workers - 1)
	waitStatus(t, ev, coll, "k", "finished")

	// Repeat counts the planned times run and skipped: a recovery slower
	// than the 1 s grid (a loaded machine) may skip the planned times that
	// came during it, as missed, which the missed count must say.
	final, _ := readPlan(t, coll, "k")
	planned := log.planned()
	if len(planned)+final.Skipped != runs || !planned[0].Equal(deadPlanned) {
		t.Fatalf("planned times run = %v and %d skipped, want %d in all, starting with the killed run's %s", planned, final.Skipped, runs, deadPlanned)
	}
	if final.MissedCount != final.Skipped {
		t.Errorf("%d planned times skipped but %d missed: none was skipped on request", final.Skipped, final.MissedCount)
	}
	succeeded := map[time.Time]int{}
	expired := 0
	for _, r := range readRunRecords(t, coll, "k") {
		switch r.Outcome {
		case "succeeded":
			succeeded[r.Planned]++
		case "expired":
			expired++
			if !r.Planned.Equal(deadPlanned) || r.WorkerID != "doomed" {
				t.Fatalf("expired run = %+v, want the killed one", r)
			}
		}
	}
	if expired != 1 || len(succeeded) != len(planned) {
		t.Fatalf("expired runs %d (want 1), planned times succeeded %d (want %d)", expired, len(succeeded), len(planned))
	}
	if grid := int(planned[len(planned)-1].Sub(planned[0])/time.Second) + 1; grid != len(planned)+final.Skipped {
		t.Fatalf("%d planned times from the first to the last run, but %d ran and %d were skipped", grid, len(planned), final.Skipped)
	}
	for pt, n := range succeeded {
		if n != 1 {
			t.Fatalf("planned time %s succeeded %d times", pt, n)
		}
	}
}

type plannedRecord struct {
	Outcome  string    `bson:"outcome"`
	WorkerID string    `bson:"worker_id"`
	Planned  time.Time `bson:"planned"`
}

func readRunRecords(t *testing.T, coll *mongo.Collection, key string) []plannedRecord {
	t.Helper()
	var doc struct {
		Runs []plannedRecord `bson:"runs"`
	}
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc.Runs
}

// waitStatus waits, on events, until the task has status.
func waitStatus(t *testing.T, ev *mschedulertest.Events, coll *mongo.Collection, key, status string) {
	t.Helper()
	ev.WaitFor(t, key+" to be "+status, func([]mscheduler.Event) bool {
		_, got := readPlan(t, coll, key)
		return got == status
	})
}

// jumpClock is a local clock that tests move, wall and monotonic time
// together, as if time itself jumped: the consumer measures the server
// clock once at start, so moving this clock afterwards moves its idea of
// the server's time, as a jump of the server clock would.
type jumpClock struct{ jump atomic.Int64 }

var testStart = time.Now()

func (c *jumpClock) now() time.Time      { return time.Now().Add(time.Duration(c.jump.Load())) }
func (c *jumpClock) mono() time.Duration { return time.Since(testStart) + time.Duration(c.jump.Load()) }
func (c *jumpClock) set(d time.Duration) { c.jump.Store(int64(d)) }
func (c *jumpClock) producer() *mscheduler.ProducerConfig {
	return &mscheduler.ProducerConfig{Clock: c.now, Monotonic: c.mono}
}
func (c *jumpClock) config(cfg *mscheduler.ConsumerConfig) *mscheduler.ConsumerConfig {
	cfg.Clock, cfg.Monotonic, cfg.ClockSyncInterval = c.now, c.mono, 1000*time.Hour
	// A jump of this clock fires no timer and changes no document, so
	// only a poll sees it: as often with a change stream open as without.
	cfg.ChangeStreamPollInterval = cfg.PollInterval
	return cfg
}

// TestPlanClockJumpsForward: the server clock jumps 3 hours ahead of an
// every-5-minutes plan's next planned time (as after workers were down for
// hours). Skip runs nothing and counts the missed times; run-once runs
// once, as the latest missed time; catch-up runs every missed time, one
// after another. None floods beyond its policy.
func TestPlanClockJumpsForward(t *testing.T) {
	// Half an interval past a planned time, so that a slow catch-up does not
	// reach the next one.
	const jump = 3*time.Hour + 150*time.Second
	cases := []struct {
		missed   mscheduler.MissedPolicy
		runs     int
		skipped  int
		lastPlan time.Duration // from the first planned time
	}{
		{mscheduler.MissedSkip, 0, 37, -1},
		{mscheduler.MissedRunOnce, 1, 36, 3 * time.Hour},
		{mscheduler.MissedCatchUp, 37, 0, 3 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(string(tc.missed), func(t *testing.T) {
			t.Parallel()
			coll := mschedulertest.Collection(t)
			clock := &jumpClock{}
			ev := mschedulertest.NewEvents()
			log := &plannedLog{}
			startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("w", ev)))
			clock.set(time.Hour + jump)

			p := newProducer[int](t, coll, nil)
			plan := mscheduler.Every(5, mscheduler.Minute)
			plan.Start = time.Now().Add(time.Hour).Truncate(time.Second)
			plan.Missed = tc.missed
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
				t.Fatal(err)
			}
			next := plan.Start.Add(37 * 5 * time.Minute)
			ev.WaitFor(t, "the plan to wait for its next planned time", func([]mscheduler.Event) bool {
				st, _ := readPlan(t, coll, "k")
				return st.Planned.Equal(next)
			})
			st, status := readPlan(t, coll, "k")
			planned := log.planned()
			if len(planned) != tc.runs || st.Runs != tc.runs || st.Skipped != tc.skipped || status != "pending" {
				t.Fatalf("ran %d (plan says %d), skipped %d, status %s; want %d runs, %d skipped, pending",
					len(planned), st.Runs, st.Skipped, status, tc.runs, tc.skipped)
			}
			for i, pt := range planned {
				if i > 0 && !pt.After(planned[i-1]) {
					t.Fatalf("planned time %s ran twice", pt)
				}
			}
			if tc.runs > 0 && !planned[len(planned)-1].Equal(plan.Start.Add(tc.lastPlan)) {
				t.Fatalf("last planned time run %s, want %s", planned[len(planned)-1], plan.Start.Add(tc.lastPlan))
			}
		})
	}
}

// TestPlanClockJumpsBack: after runs of an every-second plan the server
// clock jumps an hour back. Nothing runs again (a probe task proves the
// worker kept claiming); when the clock comes back, the plan continues
// after its last planned time, and no planned time ever ran twice.
func TestPlanClockJumpsBack(t *testing.T) {
	coll := mschedulertest.Collection(t)
	clock := &jumpClock{}
	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("w", ev)))
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Second)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
	clock.set(-time.Hour)
	before := len(log.planned())
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "probe", RunAt: time.Now().Add(-2 * time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "probe", "succeeded")
	// A plan run that was going at the jump may end after it; none starts.
	if got := len(log.planned()); got > before+1 {
		t.Fatalf("%d plan runs started after the clock jumped back", got-before)
	}
	clock.set(0)
	ev.WaitCount(t, mscheduler.EventSucceeded, ev.Count(mscheduler.EventSucceeded)+2)
	planned := log.planned()
	for i, pt := range planned {
		if i > 0 && !pt.After(planned[i-1]) {
			t.Fatalf("planned time %s ran twice", pt)
		}
	}
}

// TestPlanOverrun: an every-second plan whose handler takes 3 s. By default
// the planned times that come during a run are skipped and counted: one in
// three runs (the 2-minute plan with a 6-minute handler, scaled down). With
// OverrunQueue each runs after the previous one, none skipped.
func TestPlanOverrun(t *testing.T) {
	cases := []struct {
		overrun mscheduler.OverrunPolicy
		handler time.Duration
		gap     time.Duration
		skipped int
		repeat  int
	}{
		// Repeat counts planned times: 7 of them, one run in three.
		{mscheduler.OverrunAsMissed, 3*time.Second + 50*time.Millisecond, 3 * time.Second, 4, 7},
		{mscheduler.OverrunQueue, 2500 * time.Millisecond, time.Second, 0, 3}, // two intervals and more: each queued run is late by design
	}
	for _, tc := range cases {
		t.Run(cmpOr(string(tc.overrun), "as_missed"), func(t *testing.T) {
			t.Parallel()
			coll := mschedulertest.Collection(t)
			ev := mschedulertest.NewEvents()
			log := &plannedLog{}
			startConsumer(t, coll, recordingHandler(log, tc.handler), fastConfig("w", ev))
			p := newProducer[int](t, coll, nil)
			plan := mscheduler.Every(1, mscheduler.Second)
			plan.Repeat, plan.Overrun = tc.repeat, tc.overrun
			if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, ev, coll, "k", "finished")
			planned := log.planned()
			st, _ := readPlan(t, coll, "k")
			if len(planned) != 3 || st.Skipped != tc.skipped {
				t.Fatalf("planned times run %v, skipped %d; want 3 runs, %d skipped", planned, st.Skipped, tc.skipped)
			}
			for i := 1; i < len(planned); i++ {
				if gap := planned[i].Sub(planned[i-1]); gap != tc.gap {
					t.Fatalf("planned times %v: gap %s, want %s", planned, gap, tc.gap)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// TestPlanPauseSkipResume: a paused plan starts no run while its planned
// times pass; resuming counts them as skipped and continues after now;
// SkipNext(2) skips exactly the next two planned times.
func TestPlanPauseSkipResume(t *testing.T) {
	coll := mschedulertest.Collection(t)
	clock := &jumpClock{}
	ev := mschedulertest.NewEvents()
	log := &plannedLog{}
	startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("w", ev)))
	p := newProducer[int](t, coll, clock.producer())
	plan := mscheduler.Every(1, mscheduler.Second)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if err := p.Pause(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	// Wait out a run that may have started before the pause.
	ev.WaitFor(t, "no run going", func([]mscheduler.Event) bool {
		return readTask(t, coll, "k").Running == 0
	})
	ranBefore := len(log.planned())
	paused, _ := readPlan(t, coll, "k")

	clock.set(10 * time.Second)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "probe", RunAt: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ev, coll, "probe", "succeeded")
	if got := len(log.planned()); got != ranBefore {
		t.Fatalf("%d runs started while paused", got-ranBefore)
	}
	resumeAt := clock.now()
	if err := p.Resume(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	resumed, _ := readPlan(t, coll, "k")
	passed := int(resumed.Planned.Sub(paused.Planned) / time.Second)
	if resumed.Skipped-paused.Skipped != passed || passed < 9 || resumed.Planned.Before(resumeAt.Add(-time.Second)) {
		t.Fatalf("paused at planned %s (skipped %d), resumed at %s to planned %s (skipped %d): want the %d planned times between skipped",
			paused.Planned, paused.Skipped, resumeAt, resumed.Planned, resumed.Skipped, passed)
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, ev.Count(mscheduler.EventSucceeded)+1)

	if err := p.SkipNext(ctxT(t), "k", 2); err != nil {
		t.Fatal(err)
	}
	before, _ := readPlan(t, coll, "k")
	ran := len(log.planned())
	ev.WaitFor(t, "two runs after the skip", func([]mscheduler.Event) bool { return len(log.planned()) >= ran+2 })
	after, _ := readPlan(t, coll, "k")
	planned := log.planned()
	grid := int(after.Planned.Sub(before.Planned) / time.Second)
	runsBetween := after.Runs - before.Runs
	if after.SkipNext != 0 || after.Skipped-before.Skipped < 2 || runsBetween+after.Skipped-before.Skipped != grid {
		t.Fatalf("before %+v, after %+v: want skip_next spent, 2 or more skipped, and every planned time run or skipped", before, after)
	}
	for i, pt := range planned {
		if i > 0 && !pt.After(planned[i-1]) {
			t.Fatalf("planned time %s ran twice", pt)
		}
	}
	probe := readTask(t, coll, "probe")
	wantNotApplicable(t, p.Resume(ctxT(t), "probe"), "resume")
	if !reflect.DeepEqual(readTask(t, coll, "probe"), probe) {
		t.Fatal("Resume of a task that is not paused changed it")
	}
	wantInvalid(t, p.SkipNext(ctxT(t), "k", mscheduler.SkipNextMax+1), "n")
	if err := p.SkipNext(ctxT(t), "probe", 1); !errors.Is(err, mscheduler.ErrInvalid) {
		t.Fatalf("SkipNext on a task without a plan: %v, want ErrInvalid", err)
	}
	if err := p.Pause(ctxT(t), "nope"); !errors.Is(err, mscheduler.ErrNotFound) {
		t.Fatalf("Pause of a missing task: %v, want ErrNotFound", err)
	}
}

// TestPlanReleasedOccurrenceIsCompleted: a run released on shutdown has
// begun its occurrence; the worker that claims it later, long past grace,
// completes it instead of skipping it as missed.
func TestPlanReleasedOccurrenceIsCompleted(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	plan := mscheduler.Every(1, mscheduler.Hour)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan}, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := readPlan(t, coll, "k")
	ev := mschedulertest.NewEvents()
	leaving := startConsumer(t, coll, func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, fastConfig("leaving", ev))
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	stopCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = leaving.Stop(stopCtx)
	ev.WaitCount(t, mscheduler.EventReleased, 1)

	clock := &jumpClock{}
	log := &plannedLog{}
	startConsumer(t, coll, recordingHandler(log, 0), clock.config(fastConfig("later", ev)))
	clock.set(10 * time.Minute) // far past grace: a first start this late would be skipped
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	st, status := readPlan(t, coll, "k")
	if planned := log.planned(); len(planned) != 1 || !planned[0].Equal(first.Planned) || st.Runs != 1 || st.Skipped != 0 || status != "pending" {
		t.Fatalf("ran %v (want %s), plan %+v, status %s: want the released occurrence completed", planned, first.Planned, st, status)
	}
}

// TestPlanResumeCompletesBegunOccurrence: resuming a plan whose occurrence
// has a success of its two keeps that occurrence (and its counters) instead
// of skipping it.
func TestPlanResumeCompletesBegunOccurrence(t *testing.T) {
	coll := mschedulertest.Collection(t)
	clock := &jumpClock{}
	p := newProducer[int](t, coll, clock.producer())
	plan := mscheduler.Every(1, mscheduler.Hour)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Plan: &plan, Concurrency: 2, DistinctWorkers: true}, nil); err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	only := startConsumer(t, coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, fastConfig("only", ev))
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if err := only.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	before, _ := readPlan(t, coll, "k")
	clock.set(3 * time.Hour)
	if err := p.Resume(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	after, _ := readPlan(t, coll, "k")
	if task := readTask(t, coll, "k"); !after.Planned.Equal(before.Planned) || after.Skipped != 0 || task.Succeeded != 1 || len(task.DoneBy) != 1 {
		t.Fatalf("after resume: plan %+v, task %+v; want the begun occurrence kept", after, task)
	}
}
