// Command quickstart shows mscheduler at work: three worker processes share
// a task collection, one of them is killed in the middle of a run, and the
// run is taken over and finished by another worker.
//
//	go run ./examples/quickstart
//
// It needs nothing but a checkout of the repository: unless MONGODB_URI
// points at a server, it starts the development server (worker/devserver).
// It uses the collection "quickstart" of the database
// "mscheduler_quickstart", which it drops first.
//
// The same binary is both the coordinator and the workers: it starts each
// worker by running itself again with QUICKSTART_ROLE=worker. The
// coordinator then
//
//  1. publishes one long task (3 s, pinged every 200 ms, lease 1 s) and waits
//     until a worker runs it and has renewed its lease;
//  2. SIGKILLs that worker mid-run and starts a replacement;
//  3. publishes 99 short tasks: most succeed, every 7th fails on its first
//     attempt and succeeds on a local retry, a few always fail;
//  4. waits until every task is finished, while another worker finds the
//     dead run's lapsed lease, records it as expired and runs the task again;
//  5. stops the workers with SIGTERM and prints what happened, from the task
//     documents.
//
// It exits with status 1 if anything unexpected happens.
package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

const (
	database   = "mscheduler_quickstart"
	collection = "quickstart"

	// Environment of the worker processes.
	roleEnv    = "QUICKSTART_ROLE" // "worker" in a worker process
	nameEnv    = "QUICKSTART_WORKER"
	verboseEnv = "QUICKSTART_VERBOSE" // set: workers log at level Info

	shortTasks = 99
	longKey    = "long"
	longRun    = 3 * time.Second

	// deadline bounds the whole demonstration.
	deadline = 3 * time.Minute
)

// Params are the parameters of every task.
type Params struct {
	N       int    `bson:"n"`
	Kind    string `bson:"kind"` // quick, flaky, broken or long
	SleepMS int    `bson:"sleep_ms"`
}

// Result is what a successful run records.
type Result struct {
	Worker   string `bson:"worker"`
	Attempts int    `bson:"attempts"`
}

func main() {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(workerMain())
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart: FAILED:", err)
		os.Exit(1)
	}
}

// ---- The worker process ----

// workerMain is a worker process: package worker with one consumer.
func workerMain() int {
	name := os.Getenv(nameEnv)
	level := slog.LevelWarn
	if os.Getenv(verboseEnv) != "" {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx := context.Background()
	w, err := worker.New(ctx, worker.Config{
		URI:             os.Getenv(worker.EnvURI),
		Database:        database,
		WorkerID:        name,
		Logger:          logger,
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = worker.Register(w, collection, handle, &mscheduler.ConsumerConfig{
		Capacity:      4,
		PollInterval:  200 * time.Millisecond,
		SweepInterval: 300 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		<-w.Ready()
		fmt.Println("ready")
	}()
	if err := w.Run(ctx); err != nil { // until SIGTERM
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The coordinator reads this line: the worker's own event counters.
	c := w.Counts()
	fmt.Printf("stopped claimed=%d succeeded=%d failed=%d retried=%d expired=%d released=%d errors=%d\n",
		c[mscheduler.EventClaimed], c[mscheduler.EventSucceeded], c[mscheduler.EventFailed], c[mscheduler.EventRetried],
		c[mscheduler.EventExpired], c[mscheduler.EventReleased], c[mscheduler.EventError])
	return 0
}

// handle runs one task.
func handle(ctx context.Context, task *mscheduler.Task[Params]) (Result, error) {
	p := task.Params
	switch p.Kind {
	case "flaky":
		if task.Run.Attempt == 1 {
			return Result{}, fmt.Errorf("task %d: first attempt fails", p.N)
		}
	case "broken":
		return Result{}, fmt.Errorf("task %d: always fails", p.N)
	}
	select {
	case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
	case <-ctx.Done():
		return Result{}, context.Cause(ctx)
	}
	return Result{Worker: task.Run.WorkerID, Attempts: task.Run.Attempt}, nil
}

// ---- The coordinator ----

var began = time.Now()

// say prints one line of progress, with the time since the start.
func say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

func run() error {
	uri := os.Getenv(worker.EnvURI)
	if uri == "" {
		// The first build of the development server takes minutes; the
		// quick start's own deadline starts once it is up.
		startCtx, cancelStart := context.WithTimeout(context.Background(), 15*time.Minute)
		say("starting the development server (set %s to use another server)", worker.EnvURI)
		server, err := devserver.Start(startCtx, devserver.Options{Progress: func(msg string) { say("%s", msg) }})
		cancelStart()
		if err != nil {
			return fmt.Errorf("start the development server (or set %s): %w", worker.EnvURI, err)
		}
		defer func() {
			if err := server.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "quickstart:", err)
			}
		}()
		uri = server.URI()
		say("development server listening on %s", uri)
	} else {
		say("using the server of %s", worker.EnvURI)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	coll := client.Database(database).Collection(collection)
	if err := coll.Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", collection, err)
	}
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		return err
	}
	producer, err := mscheduler.NewProducer[Params](coll, &mscheduler.ProducerConfig{
		Defaults: mscheduler.TaskDefaults{
			PingInterval:  500 * time.Millisecond,
			WorkerTimeout: 3 * time.Second,
			MaxRetries:    2,
			RetryDelay:    100 * time.Millisecond,
			MaxFailedRuns: 2,
			Source:        "quickstart",
		},
	})
	if err != nil {
		return err
	}

	procs := &fleet{uri: uri, byName: map[string]*proc{}}
	defer procs.killAll()
	for i := 1; i <= 3; i++ {
		if _, err := procs.start(ctx, fmt.Sprintf("worker-%d", i)); err != nil {
			return err
		}
	}
	say("started worker-1, worker-2 and worker-3 (this binary, %s=worker)", roleEnv)

	// 1. The long task, and the worker running it.
	long := mscheduler.Task[Params]{
		Key: longKey, Params: Params{Kind: "long", SleepMS: int(longRun / time.Millisecond)},
		// Claimed before the short tasks, once its dead run is freed: claims
		// go by priority, then run_at, and the expired run moved its run_at
		// behind theirs.
		Priority:     10,
		PingInterval: 200 * time.Millisecond, WorkerTimeout: time.Second, MaxFailedRuns: 3,
		Description: "runs for 3 s; its first worker is killed",
	}
	if _, err := producer.Publish(ctx, long, nil); err != nil {
		return err
	}
	victim, err := waitForLeaseRenewal(ctx, coll, procs, longKey)
	if err != nil {
		return err
	}
	say("task %q is running on %s, which has renewed its lease", longKey, victim)

	// 2. Kill that worker mid-run, and start a replacement.
	if err := procs.kill(victim); err != nil {
		return err
	}
	say("killed %s with SIGKILL in the middle of the run", victim)
	if _, err := procs.start(ctx, "worker-4"); err != nil {
		return err
	}
	say("started worker-4 as a replacement")

	// 3. The short tasks.
	tasks, kinds := shortTaskList()
	if _, err := producer.PublishMany(ctx, tasks, nil); err != nil {
		return err
	}
	say("published %d more tasks: %d quick, %d flaky (fail once), %d broken (always fail)",
		len(tasks), kinds["quick"], kinds["flaky"], kinds["broken"])

	// 4. Wait for every task to finish.
	total := len(tasks) + 1
	if err := waitFinished(ctx, coll, procs, total); err != nil {
		return err
	}

	// 5. Stop the workers, then report.
	stopped, err := procs.stopAll(20 * time.Second)
	if err != nil {
		return err
	}
	say("stopped %s with SIGTERM; each shut down cleanly", strings.Join(stopped, ", "))
	docs, err := readTasks(ctx, coll)
	if err != nil {
		return err
	}
	return report(docs, total, victim, procs)
}

// shortTaskList is the mix of short tasks, and how many of each kind.
func shortTaskList() ([]mscheduler.Task[Params], map[string]int) {
	var tasks []mscheduler.Task[Params]
	kinds := map[string]int{}
	for n := 1; n <= shortTasks; n++ {
		kind := "quick"
		switch {
		case n%20 == 13:
			kind = "broken"
		case n%7 == 0:
			kind = "flaky"
		}
		kinds[kind]++
		tasks = append(tasks, mscheduler.Task[Params]{
			Key:    fmt.Sprintf("task-%03d", n),
			Params: Params{N: n, Kind: kind, SleepMS: 20 + (n*37)%81}, // 20–100 ms
		})
	}
	return tasks, kinds
}

// holderDoc is the part of a task document that shows who runs it.
type holderDoc struct {
	Status  string `bson:"status"`
	Holders map[string]struct {
		Run        string    `bson:"run"`
		Started    time.Time `bson:"started"`
		LeaseUntil time.Time `bson:"lease_until"`
	} `bson:"holders"`
}

// waitForLeaseRenewal waits until a worker holds the task and has pinged it
// once, and returns that worker. Until its first ping a run holds the long
// lease a claim takes (30 s, whatever the task's WorkerTimeout), so a kill
// before it would leave the task stuck that long.
func waitForLeaseRenewal(ctx context.Context, coll *mongo.Collection, procs *fleet, key string) (string, error) {
	limit := time.Now().Add(30 * time.Second)
	for time.Now().Before(limit) {
		var doc holderDoc
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			return "", fmt.Errorf("read task %q: %w", key, err)
		}
		for w, h := range doc.Holders {
			if h.LeaseUntil.Sub(h.Started) < 20*time.Second {
				return w, nil
			}
		}
		if doc.Status == string(mscheduler.StatusSucceeded) || doc.Status == string(mscheduler.StatusFailed) {
			return "", fmt.Errorf("task %q ended (%s) before it could be interrupted", key, doc.Status)
		}
		if err := procs.check(); err != nil {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("task %q did not start, or its lease was not renewed, within 30 s", key)
}

// waitFinished polls the collection until every task is succeeded or failed,
// printing progress every few seconds.
func waitFinished(ctx context.Context, coll *mongo.Collection, procs *fleet, total int) error {
	lastReport := time.Now()
	for {
		counts, err := statusCounts(ctx, coll)
		if err != nil {
			return err
		}
		done := counts["succeeded"] + counts["failed"]
		if done == total {
			say("all %d tasks finished: %d succeeded, %d failed", total, counts["succeeded"], counts["failed"])
			return nil
		}
		if time.Since(lastReport) >= 3*time.Second {
			say("progress: %d/%d finished (%d pending, %d running)", done, total, counts["pending"], counts["running"])
			lastReport = time.Now()
		}
		if err := procs.check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d tasks finished within %v (%v)", done, total, deadline, counts)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func statusCounts(ctx context.Context, coll *mongo.Collection) (map[string]int, error) {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "status", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read statuses: %w", err)
	}
	var docs []struct {
		Status string `bson:"status"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("read statuses: %w", err)
	}
	out := map[string]int{}
	for _, d := range docs {
		out[d.Status]++
	}
	return out, nil
}

// taskDoc is the part of a task document the report reads.
type taskDoc struct {
	Key         string `bson:"key"`
	Status      string `bson:"status"`
	Params      Params `bson:"params"`
	Concurrency int    `bson:"concurrency"`
	Succeeded   int    `bson:"succeeded"`
	FailedRuns  int    `bson:"failed_runs"`
	MaxFailed   int    `bson:"max_failed_runs"`
	Holders     bson.M `bson:"holders"`
	Runs        []struct {
		RunID      string    `bson:"run_id"`
		WorkerID   string    `bson:"worker_id"`
		Outcome    string    `bson:"outcome"`
		Attempts   int       `bson:"attempts"`
		Error      string    `bson:"error"`
		Result     Result    `bson:"result"`
		Started    time.Time `bson:"started"`
		LeaseUntil time.Time `bson:"lease_until"`
		Finished   time.Time `bson:"finished"`
	} `bson:"runs"`
}

func readTasks(ctx context.Context, coll *mongo.Collection) ([]taskDoc, error) {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	var docs []taskDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	return docs, nil
}

// workerRuns counts the runs of one worker by outcome.
type workerRuns struct{ succeeded, failed, expired, released int }

// report checks the task documents against what should have happened and
// prints the summary.
func report(docs []taskDoc, total int, victim string, procs *fleet) error {
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(docs) != total {
		problem("%d task documents, want %d", len(docs), total)
	}
	status := map[string]int{}
	perWorker := map[string]*workerRuns{}
	retries, expired := 0, 0
	var preempted []string
	for _, d := range docs {
		status[d.Status]++
		successes := 0
		for _, r := range d.Runs {
			wr := perWorker[r.WorkerID]
			if wr == nil {
				wr = &workerRuns{}
				perWorker[r.WorkerID] = wr
			}
			retries += max(r.Attempts-1, 0)
			switch r.Outcome {
			case "succeeded":
				wr.succeeded++
				successes++
			case "failed":
				wr.failed++
			case "expired":
				wr.expired++
				expired++
				preempted = append(preempted, fmt.Sprintf("%s (run of %s)", d.Key, r.WorkerID))
			case "released":
				wr.released++
			}
		}
		if successes > d.Concurrency || d.Succeeded > d.Concurrency {
			problem("task %s has %d successful runs (counter %d), more than its concurrency %d", d.Key, successes, d.Succeeded, d.Concurrency)
		}
		if len(d.Holders) != 0 {
			problem("task %s still has holders %v", d.Key, slices.Sorted(maps.Keys(d.Holders)))
		}
		want := "succeeded"
		if d.Params.Kind == "broken" {
			want = "failed"
			if d.FailedRuns != d.MaxFailed {
				problem("task %s failed after %d failed runs, want %d", d.Key, d.FailedRuns, d.MaxFailed)
			}
		}
		if d.Status != want {
			problem("task %s (%s) is %s, want %s", d.Key, d.Params.Kind, d.Status, want)
		}
		if d.Params.Kind == "flaky" && d.Status == "succeeded" && d.Runs[len(d.Runs)-1].Attempts < 2 {
			problem("flaky task %s succeeded on its first attempt", d.Key)
		}
	}
	// The long task: an expired run by the killed worker, then a success.
	if i := slices.IndexFunc(docs, func(d taskDoc) bool { return d.Key == longKey }); i >= 0 {
		d := docs[i]
		n := len(d.Runs)
		if n < 2 || d.Runs[0].WorkerID != victim || d.Runs[0].Outcome != "expired" || d.Runs[n-1].Outcome != "succeeded" || d.Runs[n-1].WorkerID == victim {
			problem("task %s: runs %+v, want an expired run by %s, then a success by another worker", longKey, d.Runs, victim)
		} else {
			dead, last := d.Runs[0], d.Runs[n-1]
			say("task %q: %s's run, whose lease lapsed at %.1fs, was recorded expired at %.1fs; %s ran it from %.1fs to %.1fs",
				longKey, victim, dead.LeaseUntil.Sub(began).Seconds(), dead.Finished.Sub(began).Seconds(),
				last.WorkerID, last.Started.Sub(began).Seconds(), last.Finished.Sub(began).Seconds())
		}
	}
	if expired != 1 {
		problem("%d expired runs, want exactly 1 (the killed worker's)", expired)
	}

	// The workers' own counters (package worker) must agree with the
	// documents.
	for name, wr := range perWorker {
		c := procs.counters(name)
		if c == nil {
			continue // killed: it could not report
		}
		if c["succeeded"] != int64(wr.succeeded) || c["failed"] != int64(wr.failed) {
			problem("%s counted %d succeeded and %d failed runs; the documents record %d and %d",
				name, c["succeeded"], c["failed"], wr.succeeded, wr.failed)
		}
	}

	fmt.Println()
	fmt.Printf("tasks:     %d succeeded, %d failed (of %d)\n", status["succeeded"], status["failed"], len(docs))
	fmt.Printf("retried:   %d local retries (attempts after the first, summed over all runs)\n", retries)
	fmt.Printf("preempted: %d run with outcome expired: %s\n", expired, strings.Join(preempted, ", "))
	fmt.Println()
	fmt.Printf("  %-9s %9s %7s %8s %8s %6s   %s\n", "worker", "succeeded", "failed", "expired", "retried", "swept", "end")
	for _, name := range slices.Sorted(maps.Keys(procs.byName)) {
		wr := cmp.Or(perWorker[name], &workerRuns{})
		c := procs.counters(name)
		retried, swept, end := "-", "-", "killed (SIGKILL)"
		if c != nil {
			retried, swept, end = fmt.Sprint(c["retried"]), fmt.Sprint(c["expired"]), "stopped cleanly (SIGTERM)"
		}
		fmt.Printf("  %-9s %9d %7d %8d %8s %6s   %s\n", name, wr.succeeded, wr.failed, wr.expired, retried, swept, end)
	}
	fmt.Println("  succeeded, failed, expired: its runs, from the task documents")
	fmt.Println("  retried, swept: its own event counters (retried, expired: runs of others it freed)")
	fmt.Println()
	if len(problems) > 0 {
		return fmt.Errorf("%d unexpected result(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	say("done: everything went as expected")
	return nil
}

// ---- Worker processes ----

// proc is a worker process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	ready  chan struct{} // closed when the worker says it is ready
	exited chan struct{} // closed when the process has exited

	mu       sync.Mutex
	final    string // its last line: its event counters
	expected bool   // killed or stopped by the coordinator
	waitErr  error
}

// fleet is the coordinator's worker processes.
type fleet struct {
	uri    string
	mu     sync.Mutex
	byName map[string]*proc
	order  []string
}

// start runs a worker process and waits until it is ready.
func (f *fleet) start(ctx context.Context, name string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), roleEnv+"=worker", nameEnv+"="+name, worker.EnvURI+"="+f.uri)
	cmd.Stderr = &prefixWriter{prefix: "    " + name + ": ", w: os.Stderr}
	cmd.SysProcAttr = sysProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{})}
	f.mu.Lock()
	f.byName[name] = p
	f.order = append(f.order, name)
	f.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				close(p.ready)
			case strings.HasPrefix(line, "stopped "):
				p.mu.Lock()
				p.final = strings.TrimPrefix(line, "stopped ")
				p.mu.Unlock()
			default:
				fmt.Printf("    %s: %s\n", name, line)
			}
		}
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before it was ready: %v", name, p.err())
	case <-ctx.Done():
		return nil, fmt.Errorf("%s not ready: %w", name, ctx.Err())
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("%s not ready within 30 s", name)
	}
}

func (p *proc) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

func (f *fleet) procs() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*proc, 0, len(f.order))
	for _, n := range f.order {
		out = append(out, f.byName[n])
	}
	return out
}

// check reports a worker process that exited on its own.
func (f *fleet) check() error {
	for _, p := range f.procs() {
		select {
		case <-p.exited:
			p.mu.Lock()
			expected := p.expected
			p.mu.Unlock()
			if !expected {
				return fmt.Errorf("%s exited unexpectedly: %v", p.name, p.err())
			}
		default:
		}
	}
	return nil
}

// kill SIGKILLs a worker, as a crash would, and waits for it to exit.
func (f *fleet) kill(name string) error {
	f.mu.Lock()
	p := f.byName[name]
	f.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no worker process is named %q", name)
	}
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	<-p.exited
	return nil
}

// stopAll sends SIGTERM to every live worker and waits for each to exit
// with status 0; it returns their names.
func (f *fleet) stopAll(timeout time.Duration) ([]string, error) {
	var live []*proc
	for _, p := range f.procs() {
		select {
		case <-p.exited:
			continue
		default:
		}
		p.mu.Lock()
		p.expected = true
		p.mu.Unlock()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return nil, fmt.Errorf("stop %s: %w", p.name, err)
		}
		live = append(live, p)
	}
	limit := time.After(timeout)
	var names []string
	for _, p := range live {
		select {
		case <-p.exited:
		case <-limit:
			return nil, fmt.Errorf("%s did not stop within %v of SIGTERM", p.name, timeout)
		}
		if err := p.err(); err != nil {
			return nil, fmt.Errorf("%s did not stop cleanly: %v", p.name, err)
		}
		names = append(names, p.name)
	}
	return names, nil
}

// killAll kills whatever worker is still running, on the way out.
func (f *fleet) killAll() {
	for _, p := range f.procs() {
		select {
		case <-p.exited:
		default:
			p.mu.Lock()
			p.expected = true
			p.mu.Unlock()
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// counters are the event counters a worker printed when it stopped, or nil.
func (f *fleet) counters(name string) map[string]int64 {
	f.mu.Lock()
	p := f.byName[name]
	f.mu.Unlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final == "" {
		return nil
	}
	out := map[string]int64{}
	for _, field := range strings.Fields(p.final) {
		k, v, _ := strings.Cut(field, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out
}

// prefixWriter writes each line with a prefix.
type prefixWriter struct {
	prefix string
	w      io.Writer
	mu     sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := slices.Index(p.buf, '\n')
		if i < 0 {
			break
		}
		_, _ = fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]) // a lost log line must not stop the worker
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}
