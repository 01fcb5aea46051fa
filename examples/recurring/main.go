// Command recurring shows tasks with plans (recurring tasks): one producer
// and two consumers, worker-a and worker-b, share a task collection in one
// process, and four planned tasks run on them.
//
//	go run ./examples/recurring
//
// It needs nothing but a checkout of the repository: unless MONGODB_URI
// points at a server, it starts the development server (worker/devserver).
// It uses the collection "recurring" of the database
// "mscheduler_recurring", which it drops first. It takes about 10 seconds:
//
//  1. every-2s runs every 2 seconds, 5 times; each run prints its planned
//     time and the worker that ran it;
//  2. run-once runs every second from a Start 10 seconds in the past, for
//     13 planned times, under MissedRunOnce: its first run stands for the
//     10 planned times already missed, which are counted in plan.skipped
//     and use up Repeat as runs do, so it runs 3 times;
//  3. cron-berlin runs at "*/3 * * * * *" (every third second) read in
//     Europe/Berlin, 3 times;
//  4. pause-resume runs every second, for 8 planned times; it is paused
//     after its second run and resumed 3 seconds later, and the planned
//     times that passed meanwhile are counted as skipped.
//
// It waits until every plan is finished, stops the consumers, and prints a
// summary per task from the task documents. It exits with status 1 if a
// planned time ran twice, a plan did not finish in time, or anything else
// is unexpected.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

const (
	database   = "mscheduler_recurring"
	collection = "recurring"
	berlin     = "Europe/Berlin"
	// finishWithin bounds the wait for the plans, which need about 10 s.
	finishWithin = 30 * time.Second
	pauseFor     = 3 * time.Second
)

// Params are the parameters of every task: none, the plans are the point.
type Params struct{}

// call is one handler call, kept to find a planned time that ran twice.
type call struct {
	key, worker string
	planned     time.Time
}

var (
	began   = time.Now()
	callsMu sync.Mutex
	calls   []call
)

func say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "recurring: FAILED:", err)
		os.Exit(1)
	}
}

func handle(ctx context.Context, task *mscheduler.Task[Params]) (string, error) {
	r := task.Run
	callsMu.Lock()
	calls = append(calls, call{task.Key, r.WorkerID, r.PlannedAt})
	callsMu.Unlock()
	// The handler gets the task's plan: a cron plan's planned times read
	// best in its own zone.
	say("%-12s planned %s, run by %s %3d ms after it", task.Key, inZone(r.PlannedAt, task.Plan.Zone).Format(stamp),
		r.WorkerID, time.Since(r.PlannedAt).Milliseconds())
	return r.WorkerID, nil
}

const stamp = "15:04:05 MST"

// inZone is t in zone, or in local time.
func inZone(t time.Time, zone string) time.Time {
	if loc, err := time.LoadLocation(zone); err == nil && zone != "" {
		return t.In(loc)
	}
	return t.Local()
}

func run() error {
	uri := os.Getenv(worker.EnvURI)
	if uri == "" {
		// The first build of the development server takes minutes; the
		// example's own deadline starts once it is up.
		startCtx, cancelStart := context.WithTimeout(context.Background(), 15*time.Minute)
		say("starting the development server (set %s to use another server)", worker.EnvURI)
		server, err := devserver.Start(startCtx, devserver.Options{Progress: func(msg string) { say("%s", msg) }})
		cancelStart()
		if err != nil {
			return fmt.Errorf("start the development server (or set %s): %w", worker.EnvURI, err)
		}
		defer func() {
			if err := server.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "recurring:", err)
			}
		}()
		uri = server.URI()
		say("development server listening on %s", uri)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	coll := client.Database(database).Collection(collection)
	if err := coll.Drop(ctx); err != nil {
		return err
	}
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		return err
	}
	producer, err := mscheduler.NewProducer[Params](coll, nil)
	if err != nil {
		return err
	}

	// Warnings only: the consumers log every skip at level Info, and this
	// program prints those itself.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var consumers []*mscheduler.Consumer[Params, string]
	defer func() { // on the error paths; after a clean Stop this is a no-op
		for _, c := range consumers {
			_ = c.Stop(context.Background())
		}
	}()
	for _, id := range []string{"worker-a", "worker-b"} {
		// The default 1 s poll would start runs up to a second late on a
		// server without change streams, such as a standalone server.
		c, err := mscheduler.NewConsumer(coll, handle, &mscheduler.ConsumerConfig{
			WorkerID: id, Capacity: 2, PollInterval: 100 * time.Millisecond, Logger: logger})
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		consumers = append(consumers, c)
	}

	every := mscheduler.Every(2, mscheduler.Second)
	every.Repeat = 5
	runOnce := mscheduler.Every(1, mscheduler.Second)
	runOnce.Start, runOnce.Missed, runOnce.Repeat = time.Now().Add(-10*time.Second), mscheduler.MissedRunOnce, 13
	cron := mscheduler.Cron("*/3 * * * * *")
	cron.Zone, cron.Repeat = berlin, 3
	paused := mscheduler.Every(1, mscheduler.Second)
	paused.Repeat = 8
	tasks := []mscheduler.Task[Params]{
		{Key: "every-2s", Plan: &every},
		{Key: "run-once", Plan: &runOnce},
		{Key: "cron-berlin", Plan: &cron},
		{Key: "pause-resume", Plan: &paused},
	}
	if _, err := producer.PublishMany(ctx, tasks, nil); err != nil {
		return err
	}
	say("published every-2s, run-once, cron-berlin and pause-resume; worker-a and worker-b are consuming")
	docs, err := readTasks(ctx, coll)
	if err != nil {
		return err
	}
	say("run-once starts 10 s in the past: plan.skipped=%d at publish, its first run is planned at %s",
		docs["run-once"].Plan.Skipped, inZone(docs["run-once"].Plan.Planned, "").Format(stamp))

	// 4. Pause after the second run. Planned times after pausedAt (the
	// pause is in force) and before resumedAt must not run.
	const pr = "pause-resume"
	if _, err := waitFor(ctx, coll, pr+" to run twice", func(d taskDoc) bool { return d.Key != pr || d.Plan.Runs >= 2 }); err != nil {
		return err
	}
	if err := producer.Pause(ctx, pr); err != nil {
		return err
	}
	pausedAt := time.Now()
	if docs, err = readTasks(ctx, coll); err != nil {
		return err
	}
	say("Pause(%q) after %d runs (plan.skipped=%d); Resume in %v", pr, docs[pr].Plan.Runs, docs[pr].Plan.Skipped, pauseFor)
	time.Sleep(pauseFor)
	resumedAt := time.Now()
	if err := producer.Resume(ctx, pr); err != nil {
		return err
	}
	if docs, err = readTasks(ctx, coll); err != nil {
		return err
	}
	say("Resume(%q): plan.skipped=%d, next planned at %s", pr, docs[pr].Plan.Skipped, inZone(docs[pr].Plan.Planned, "").Format(stamp))

	finished := func(d taskDoc) bool { return d.Status == string(mscheduler.StatusFinished) }
	if docs, err = waitFor(ctx, coll, "every plan to finish", finished); err != nil {
		return err
	}
	say("every plan is finished")
	// Stop waits for running handlers, so no run is cut short.
	for _, c := range consumers {
		if err := c.Stop(ctx); err != nil {
			return fmt.Errorf("stop %s: %w", c.WorkerID(), err)
		}
	}
	say("stopped worker-a and worker-b")
	return report(docs, tasks, pausedAt, resumedAt)
}

// taskDoc is the part of a task document this program reads.
type taskDoc struct {
	Key    string `bson:"key"`
	Status string `bson:"status"`
	Plan   struct {
		Kind    string    `bson:"kind"`
		Planned time.Time `bson:"planned"`
		Runs    int       `bson:"runs"`
		Skipped int       `bson:"skipped"`
	} `bson:"plan"`
}

func readTasks(ctx context.Context, coll *mongo.Collection) (map[string]taskDoc, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	var list []taskDoc
	if err := cur.All(ctx, &list); err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	docs := map[string]taskDoc{}
	for _, d := range list {
		docs[d.Key] = d
	}
	return docs, nil
}

// waitFor polls the task documents until ok holds for every one of them,
// for at most finishWithin.
func waitFor(ctx context.Context, coll *mongo.Collection, what string, ok func(taskDoc) bool) (map[string]taskDoc, error) {
	limit := time.Now().Add(finishWithin)
	for {
		docs, err := readTasks(ctx, coll)
		if err != nil {
			return nil, err
		}
		var open []string
		for _, d := range docs {
			if !ok(d) {
				open = append(open, fmt.Sprintf("%s (%s, %d runs)", d.Key, d.Status, d.Plan.Runs))
			}
		}
		if len(open) == 0 {
			return docs, nil
		}
		if time.Now().After(limit) {
			slices.Sort(open)
			return nil, fmt.Errorf("waited %v for %s: %s", finishWithin, what, strings.Join(open, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// report prints one line per task and checks what the plans promise.
// wantRuns are the runs of the plans whose count does not depend on timing.
var wantRuns = map[string]int{"every-2s": 5, "run-once": 3, "cron-berlin": 3}

func report(docs map[string]taskDoc, tasks []mscheduler.Task[Params], pausedAt, resumedAt time.Time) error {
	var problems []string
	callsMu.Lock()
	defer callsMu.Unlock()
	fmt.Printf("\n  %-12s %-5s %4s %7s %-8s  %s\n", "task", "kind", "runs", "skipped", "status", "planned times run (worker)")
	for _, t := range tasks {
		d := docs[t.Key]
		var seen []string
		ran := map[time.Time]string{}
		for _, c := range calls {
			if c.key != t.Key {
				continue
			}
			at := inZone(c.planned, t.Plan.Zone)
			if w, dup := ran[c.planned]; dup {
				problems = append(problems, fmt.Sprintf("%s: planned time %s ran twice (%s, then %s)", t.Key, at.Format(stamp), w, c.worker))
			}
			ran[c.planned] = c.worker
			seen = append(seen, fmt.Sprintf("%s (%s)", at.Format(time.TimeOnly), strings.TrimPrefix(c.worker, "worker-")))
			if t.Key == "pause-resume" && c.planned.After(pausedAt) && c.planned.Before(resumedAt) {
				problems = append(problems, fmt.Sprintf("%s: planned time %s ran while paused", t.Key, at.Format(stamp)))
			}
		}
		// Repeat counts planned times: each one ran or was skipped.
		if d.Plan.Runs+d.Plan.Skipped != t.Plan.Repeat || len(seen) != d.Plan.Runs {
			problems = append(problems, fmt.Sprintf("%s: plan.runs=%d, plan.skipped=%d and %d handler calls, want runs and skipped to make %d, and a call per run",
				t.Key, d.Plan.Runs, d.Plan.Skipped, len(seen), t.Plan.Repeat))
		}
		if want, ok := wantRuns[t.Key]; ok && d.Plan.Runs != want {
			problems = append(problems, fmt.Sprintf("%s: plan.runs=%d, want %d", t.Key, d.Plan.Runs, want))
		}
		fmt.Printf("  %-12s %-5s %4d %7d %-8s  %s\n", t.Key, d.Plan.Kind, d.Plan.Runs, d.Plan.Skipped, d.Status, strings.Join(seen, " "))
	}
	fmt.Println("  (cron-berlin's planned times are Berlin time; the others are local time)")
	fmt.Println()
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("%d unexpected result(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	say("done: every planned time ran once, and every plan finished")
	return nil
}
