package mscheduler_test

import (
	"context"
	"sort"
	"sync"
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
	Start    time.Time `bson:"start"`
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
		log.add(task)
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
