package main

// Worker memory is measured in a child process, this same binary run again
// with MSCHEDULER_BENCH_ROLE set, so that the benchmark's own memory does
// not count. The child starts a consumer (or the raw claim loop), lets it
// poll, and prints its resident set size.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Environment of a child process.
const (
	envRole     = "MSCHEDULER_BENCH_ROLE" // roleLibrary or roleRaw
	envURI      = "MSCHEDULER_BENCH_URI"
	envColl     = "MSCHEDULER_BENCH_COLLECTION"
	envSettle   = "MSCHEDULER_BENCH_SETTLE"
	envCapacity = "MSCHEDULER_BENCH_CAPACITY"

	roleLibrary = "library-worker"
	roleRaw     = "raw-worker"

	// childTimeout bounds a child process.
	childTimeout = 3 * time.Minute
)

// rssUnknown marks a resident set size this platform does not report.
const rssUnknown = -1

// memoryResult holds resident set sizes in kB, or rssUnknown.
type memoryResult struct {
	Pending    int
	LibIdle    int64 // a consumer on an empty collection
	LibPending int64 // a consumer on a collection of Pending tasks not yet due
	RawIdle    int64 // the raw claim, polled as often, on the empty collection
	RawPending int64 // and on the large one
}

func memoryPhase(ctx context.Context, e *env) (memoryResult, error) {
	res := memoryResult{Pending: e.cfg.MemPending}
	const idle, pending = "memory_idle", "memory_pending"
	if err := e.freshCollection(ctx, idle); err != nil {
		return res, err
	}
	if err := e.freshCollection(ctx, pending); err != nil {
		return res, err
	}
	if err := rawInsertMany(ctx, e, e.db.Collection(pending), e.cfg.MemPending, 1000, time.Now().Add(24*time.Hour)); err != nil {
		return res, err
	}
	// The two idle measurements run at once. The two on the large
	// collection run one after the other: on the development server each
	// of their scans takes seconds, and a second worker's scans would only
	// queue behind them.
	steps := [][]childRun{
		{{roleLibrary, idle, &res.LibIdle}, {roleRaw, idle, &res.RawIdle}},
		{{roleLibrary, pending, &res.LibPending}},
		{{roleRaw, pending, &res.RawPending}},
	}
	for _, step := range steps {
		if err := e.runChildren(ctx, step); err != nil {
			return res, err
		}
	}
	return res, errors.Join(e.dropCollection(ctx, idle), e.dropCollection(ctx, pending))
}

// childRun is one worker process to measure.
type childRun struct {
	role, coll string
	into       *int64
}

// runChildren runs worker processes at once and records their RSS.
func (e *env) runChildren(ctx context.Context, runs []childRun) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range runs {
		g.Go(func() error {
			kb, err := e.childRSS(gctx, r.role, r.coll)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", r.role, r.coll, err)
			}
			*r.into = kb
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, r := range runs {
		e.say("memory: %s on %s: %s", r.role, r.coll, fmtRSS(*r.into))
	}
	return nil
}

// childRSS runs this binary as a worker of role on coll and returns the
// resident set size it reports.
func (e *env) childRSS(ctx context.Context, role, coll string) (int64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), envRole+"="+role, envURI+"="+e.uri, envColl+"="+coll,
		envSettle+"="+e.cfg.MemSettle.String(), envCapacity+"="+strconv.Itoa(e.cfg.Capacity))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("worker process: %w", err)
	}
	return parseRSSLine(out)
}

func parseRSSLine(out []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "rss_kb ")
		if !ok {
			continue
		}
		if v == "n/a" {
			return rssUnknown, nil
		}
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("worker process printed no rss_kb line: %q", out)
}

func isChild() bool { return os.Getenv(envRole) != "" }

// childMain is the child process: it prints "rss_kb N" (or "rss_kb n/a").
func childMain() int {
	kb, err := runChild()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	if kb == rssUnknown {
		fmt.Println("rss_kb n/a")
	} else {
		fmt.Printf("rss_kb %d\n", kb)
	}
	return 0
}

// runChild starts the worker, waits until it has made its first pass over
// the collection and run for the settle time, and returns its RSS. It
// leaves the worker running: the process exits right after.
func runChild() (int64, error) {
	settle, err := time.ParseDuration(os.Getenv(envSettle))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", envSettle, err)
	}
	capacity, err := strconv.Atoi(os.Getenv(envCapacity))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", envCapacity, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()

	// Count the replies to the worker's reads and claims, to know it has
	// made its first pass over the collection.
	replies := newCommandReplies()
	mon := &event.CommandMonitor{
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) { replies.add(ev.CommandName) },
		Failed:    func(_ context.Context, ev *event.CommandFailedEvent) { replies.add(ev.CommandName) },
	}
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(envURI)).SetMonitor(mon))
	if err != nil {
		return 0, err
	}
	coll := client.Database(database).Collection(os.Getenv(envColl))

	// A consumer's first pass is a sweep (find), a claim (findAndModify)
	// and a look for the next due task (find); the raw loop's is a claim.
	var need map[string]int64
	switch role := os.Getenv(envRole); role {
	case roleLibrary:
		need = map[string]int64{"find": 2, "findAndModify": 1}
		c, err := mscheduler.NewConsumer(coll, noop, &mscheduler.ConsumerConfig{WorkerID: "memory", Capacity: capacity,
			Logger: quietLogger()})
		if err != nil {
			return 0, err
		}
		if err := c.Start(ctx); err != nil {
			return 0, err
		}
	case roleRaw:
		need = map[string]int64{"findAndModify": 1}
		go rawPoll(ctx, coll)
	default:
		return 0, fmt.Errorf("%s: unknown role %q", envRole, role)
	}

	deadline := time.Now().Add(settle)
	for !replies.reached(need) || time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the worker's first pass did not end within %s: %w", childTimeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return readRSS(), nil
}

// commandReplies counts replies by command name.
type commandReplies struct {
	mu     sync.Mutex
	counts map[string]int64
}

func newCommandReplies() *commandReplies { return &commandReplies{counts: map[string]int64{}} }

func (c *commandReplies) add(name string) {
	c.mu.Lock()
	c.counts[name]++
	c.mu.Unlock()
}

// reached reports whether every count in need has been reached.
func (c *commandReplies) reached(need map[string]int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range need {
		if c.counts[name] < n {
			return false
		}
	}
	return true
}

// rawPoll is the raw limit of an idle worker: one raw claim per default
// poll interval, as an idle consumer's claim loop makes.
func rawPoll(ctx context.Context, coll *mongo.Collection) {
	for ctx.Err() == nil {
		_, _, _, err := rawClaim(ctx, childTimeout, coll, "raw-memory")
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "bench worker: raw claim:", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(mscheduler.PollIntervalDefault):
		}
	}
}

// readRSS is this process's resident set size in kB, from /proc/self/status
// (Linux), or rssUnknown.
func readRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return rssUnknown
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				return rssUnknown
			}
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n
			}
		}
	}
	return rssUnknown
}
