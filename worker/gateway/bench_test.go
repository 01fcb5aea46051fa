package gateway_test

// Benchmarks of the gateway against the Go consumer it is built on, on the
// same server in the same run. They run only with -bench:
//
//	go test -run '^$' -bench 'Drain|Latency|Ratio' -benchtime 3x ./worker/gateway/
//
// BenchmarkDrain/consumer and /gateway drain a backlog of -gateway.backlog
// tasks (200) per iteration, each iteration in a fresh collection: the
// backlog is published and a dedicated, command-monitored client connected
// with the timer stopped; the timer then runs from the worker's start (the
// consumer's Start, or the executor's first take, which starts the
// gateway's pool) until every task has succeeded. Both sides hold 16 runs
// at most and poll every 50 ms. The gateway's executor is one process with
// 16 slots: a taker that asks for as many runs as it has free slots
// (max ≤ 16, long-polling) and a goroutine per run that completes it over
// a keep-alive connection. Commands are those the worker side's client
// sends on the collection (and its .runs and .meta) while the timer runs,
// so the publish's inserts are not among them; run history inserts are.
//
// BenchmarkGatewayRatio runs both sides back to back in each iteration,
// alternating which goes first, and reports the gateway's throughput as a
// share of the consumer's and the commands per task it sends beyond it.
//
// BenchmarkLatency/consumer and /gateway publish one task at a time into an
// idle, started consumer, or while an executor long-polls, and measure
// from the publish call to the handler's start or to the take's answer at
// the executor: ms/op is the mean over -gateway.latency-samples tasks per
// iteration. /gateway-max1 takes one run at a time, without the take's
// linger for more runs.
//
// The numbers of one run are for comparing the two sides: on the
// development server every statement is slow and one runs at a time.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

var (
	benchBacklog        = flag.Int("gateway.backlog", 200, "BenchmarkDrain, BenchmarkGatewayRatio: tasks drained per iteration")
	benchLatencySamples = flag.Int("gateway.latency-samples", 10, "BenchmarkLatency: tasks published one at a time per iteration")
)

const (
	benchCapacity     = 16
	benchPollInterval = 50 * time.Millisecond
	benchStall        = 5 * time.Minute // an iteration that takes longer fails
)

// drainStats is what one drain measured.
type drainStats struct {
	tasks     int
	elapsed   time.Duration
	cmds      map[string]int64         // by command name, on the collection and its .runs and .meta
	stmts     map[string]int64         // statements of those commands that carry several (insert, update, delete)
	other     map[string]int64         // by command name, on no collection (listCollections, hello, ...)
	logs      map[string]int64         // the worker side's log records at Info and above, by message
	conflicts int64                    // gateway: completes answered other than 200 or 202
	pending   int64                    // gateway: completes answered 202
	takes     [benchCapacity + 1]int64 // gateway: takes by the runs they got
}

func (s *drainStats) add(o drainStats) {
	s.tasks += o.tasks
	s.elapsed += o.elapsed
	s.conflicts += o.conflicts
	s.pending += o.pending
	for i, v := range o.takes {
		s.takes[i] += v
	}
	s.cmds = addCounts(s.cmds, o.cmds)
	s.stmts = addCounts(s.stmts, o.stmts)
	s.other = addCounts(s.other, o.other)
	s.logs = addCounts(s.logs, o.logs)
}

func addCounts(to, from map[string]int64) map[string]int64 {
	if to == nil {
		to = map[string]int64{}
	}
	for k, v := range from {
		to[k] += v
	}
	return to
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

func (s drainStats) tasksPerSec() float64 { return float64(s.tasks) / s.elapsed.Seconds() }
func (s drainStats) cmdsPerTask() float64 { return float64(sum(s.cmds)) / float64(s.tasks) }
func (s drainStats) cmdsBesidesInserts() float64 {
	return float64(sum(s.cmds)-s.cmds["insert"]) / float64(s.tasks)
}

// perTask lists counts per task, by name.
func perTask(m map[string]int64, tasks int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, float64(m[k])/float64(tasks)))
	}
	return strings.Join(parts, ", ")
}

func (s drainStats) String() string {
	out := fmt.Sprintf("%d tasks in %s: %.1f tasks/s, %.3f commands/task (%.3f besides inserts) [%s]; other commands %v",
		s.tasks, s.elapsed.Round(time.Millisecond), s.tasksPerSec(), s.cmdsPerTask(), s.cmdsBesidesInserts(), perTask(s.cmds, s.tasks), s.other)
	for _, k := range slices.Sorted(maps.Keys(s.stmts)) {
		out += fmt.Sprintf("; %s statements %.3f/task, %.1f/command", k, float64(s.stmts[k])/float64(s.tasks), float64(s.stmts[k])/float64(s.cmds[k]))
	}
	if len(s.logs) > 0 {
		out += fmt.Sprintf("; logs %v", s.logs)
	}
	if t := sum(s.takesByRuns()); t > 0 {
		out += fmt.Sprintf("; %d takes by runs got %v", t, s.takesByRuns())
	}
	if s.conflicts > 0 || s.pending > 0 {
		out += fmt.Sprintf("; completes answered 409 or other %d, 202 %d", s.conflicts, s.pending)
	}
	return out
}

func (s drainStats) takesByRuns() map[string]int64 {
	m := map[string]int64{}
	for i, v := range s.takes {
		if v > 0 {
			m[fmt.Sprint(i)] = v
		}
	}
	return m
}

func (s drainStats) report(b *testing.B) {
	b.ReportMetric(s.tasksPerSec(), "tasks/s")
	b.ReportMetric(s.cmdsPerTask(), "cmds/task")
	b.ReportMetric(s.cmdsBesidesInserts(), "cmds-noins/task")
	// Runs claimed and given back unrun: in a drain every claim is for a
	// take waiting, so the target is none.
	b.ReportMetric(float64(s.logs["run released"]), "released")
}

// cmdCounter counts the commands a client sends on one collection (and its
// .runs and .meta) while on.
type cmdCounter struct {
	coll string
	on   atomic.Bool

	mu    sync.Mutex
	cmds  map[string]int64
	stmts map[string]int64
	other map[string]int64
}

func newCmdCounter(coll string) *cmdCounter {
	return &cmdCounter{coll: coll, cmds: map[string]int64{}, stmts: map[string]int64{}, other: map[string]int64{}}
}

func (c *cmdCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		if !c.on.Load() {
			return
		}
		target := commandTarget(ev)
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case target == c.coll || target == c.coll+".runs" || target == c.coll+".meta":
			c.cmds[ev.CommandName]++
			if field, ok := statementArrays[ev.CommandName]; ok {
				if vals, err := ev.Command.Lookup(field).Array().Values(); err == nil {
					c.stmts[ev.CommandName] += int64(len(vals))
				}
			}
		case target == "":
			c.other[ev.CommandName]++
		}
	}}
}

// statementArrays names the array of a write command's statements.
var statementArrays = map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}

// commandTarget is the collection a command is about, or "".
func commandTarget(ev *event.CommandStartedEvent) string {
	if ev.CommandName == "getMore" {
		s, _ := ev.Command.Lookup("collection").StringValueOK()
		return s
	}
	el, err := ev.Command.IndexErr(0)
	if err != nil {
		return ""
	}
	s, _ := el.Value().StringValueOK()
	return s
}

func (c *cmdCounter) snapshot() (cmds, stmts, other map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.cmds), maps.Clone(c.stmts), maps.Clone(c.other)
}

// logCounter is a slog handler that counts records at Info and above by
// message, and prints those at Warn and above.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int64
	warn   slog.Handler
}

func newLogCounter(b *testing.B) *logCounter {
	return &logCounter{counts: map[string]int64{}, warn: slog.NewTextHandler(benchLogWriter{b}, &slog.HandlerOptions{Level: slog.LevelWarn})}
}

func (l *logCounter) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *logCounter) Handle(ctx context.Context, r slog.Record) error {
	l.mu.Lock()
	l.counts[r.Message]++
	l.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		return l.warn.Handle(ctx, r)
	}
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) snapshot() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.counts)
}

type benchLogWriter struct{ b *testing.B }

func (w benchLogWriter) Write(p []byte) (int, error) {
	w.b.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// drainEnv is one iteration's fresh collection with its backlog published,
// and the worker side's monitored client.
type drainEnv struct {
	b      *testing.B
	name   string
	coll   *mongo.Collection // through the shared, unmonitored client
	client *mongo.Client     // the worker side's, monitored
	cmds   *cmdCounter
	logs   *logCounter
}

func randomSuffix() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// newDrainEnv creates a collection with n tasks published, and a monitored
// client for the worker side. Call it with the timer stopped.
func newDrainEnv(b *testing.B, side string, n int) *drainEnv {
	b.Helper()
	ctx := b.Context()
	name := fmt.Sprintf("bench_%s_%s", side, randomSuffix())
	e := &drainEnv{b: b, name: name, cmds: newCmdCounter(name), logs: newLogCounter(b)}
	e.coll = mschedulertest.Client().Database(mschedulertest.Database).Collection(name)
	if err := mscheduler.EnsureIndexes(ctx, e.coll); err != nil {
		b.Fatal(err)
	}
	publishBacklog(b, e.coll, n)
	client, err := mongo.Connect(options.Client().ApplyURI(mschedulertest.URI()).SetMonitor(e.cmds.monitor()))
	if err != nil {
		b.Fatal(err)
	}
	e.client = client
	if err := client.Ping(ctx, nil); err != nil {
		b.Fatal(err)
	}
	return e
}

func publishBacklog(b *testing.B, coll *mongo.Collection, n int) {
	b.Helper()
	p, err := mscheduler.NewProducer[bson.M](coll, nil)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 100
	for from := 0; from < n; from += batch {
		tasks := make([]mscheduler.Task[bson.M], 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			tasks = append(tasks, mscheduler.Task[bson.M]{Key: fmt.Sprintf("t%05d", i), Params: bson.M{"i": i}})
		}
		res, err := p.PublishMany(b.Context(), tasks, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != mscheduler.PublishInserted {
				b.Fatalf("publish %s: %s", r.Key, r.Outcome)
			}
		}
	}
}

// workerColl is the collection through the worker side's client.
func (e *drainEnv) workerColl() *mongo.Collection {
	return e.client.Database(mschedulertest.Database).Collection(e.name)
}

// finish checks that all n tasks succeeded, then drops the collection and
// disconnects. Call it with the timer stopped.
func (e *drainEnv) finish(n int) {
	e.b.Helper()
	ctx := context.Background()
	defer func() {
		_ = e.client.Disconnect(ctx)
		db := e.coll.Database()
		for _, c := range []string{e.name, e.name + ".runs", e.name + ".meta"} {
			_ = db.Collection(c).Drop(ctx)
		}
	}()
	ok, err := e.coll.CountDocuments(ctx, bson.D{{Key: "status", Value: mscheduler.StatusSucceeded}})
	if err != nil {
		e.b.Fatal(err)
	}
	if ok != int64(n) {
		e.b.Fatalf("%s: %d of %d tasks succeeded", e.name, ok, n)
	}
}

// start begins the measured window.
func (e *drainEnv) start() time.Time {
	e.cmds.on.Store(true)
	return time.Now()
}

// stop ends it.
func (e *drainEnv) stop(started time.Time, n int) drainStats {
	elapsed := time.Since(started)
	e.cmds.on.Store(false)
	cmds, stmts, other := e.cmds.snapshot()
	return drainStats{tasks: n, elapsed: elapsed, cmds: cmds, stmts: stmts, other: other}
}

// drainConsumer drains a fresh backlog of n tasks with a Go consumer.
func drainConsumer(b *testing.B, n int) drainStats {
	b.StopTimer()
	e := newDrainEnv(b, "consumer", n)
	ctx, cancel := context.WithTimeout(b.Context(), benchStall)
	defer cancel()
	var succeeded atomic.Int64
	done := make(chan struct{})
	c, err := mscheduler.NewConsumer(e.workerColl(),
		func(context.Context, *mscheduler.Task[bson.RawValue]) (bson.RawValue, error) {
			return bson.RawValue{Type: bson.TypeNull}, nil
		},
		&mscheduler.ConsumerConfig{
			WorkerID: "bench-consumer", Capacity: benchCapacity, PollInterval: benchPollInterval,
			Logger: slog.New(e.logs),
			OnEvent: func(ev mscheduler.Event) {
				if ev.Kind == mscheduler.EventSucceeded && succeeded.Add(1) == int64(n) {
					close(done)
				}
			},
		})
	if err != nil {
		b.Fatal(err)
	}

	b.StartTimer()
	started := e.start()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("consumer: %d of %d tasks succeeded within %s", succeeded.Load(), n, benchStall)
	}
	st := e.stop(started, n)
	b.StopTimer()

	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := c.Stop(stopCtx); err != nil {
		b.Fatal(err)
	}
	st.logs = e.logs.snapshot()
	e.finish(n)
	return st
}

// executor is an executor process talking to a gateway over HTTP.
type executor struct {
	hc      *http.Client
	base    string // the collection's URL
	id      string
	session string
}

func newExecutor(srv *httptest.Server, coll, id string) (*executor, *http.Transport) {
	tr := &http.Transport{MaxIdleConns: 100, MaxIdleConnsPerHost: 100, IdleConnTimeout: time.Minute}
	return &executor{hc: &http.Client{Transport: tr}, base: srv.URL + "/v1/collections/" + coll, id: id, session: "s-" + randomSuffix()}, tr
}

// post sends a JSON request and decodes the JSON answer into out.
func (x *executor) post(ctx context.Context, path string, in, out any) (int, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", x.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := x.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: %d %q: %w", path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, nil
}

type takenRun struct {
	RunID string `json:"run_id"`
	Key   string `json:"key"`
}

// take asks for up to n runs, waiting up to wait for one.
func (x *executor) take(ctx context.Context, n int, wait time.Duration) ([]takenRun, error) {
	var out struct {
		Runs  []takenRun `json:"runs"`
		Error string     `json:"error"`
	}
	code, err := x.post(ctx, "/take", map[string]any{"executor": x.id, "session": x.session, "max": n, "wait_ms": wait.Milliseconds()}, &out)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("take: %d %s", code, out.Error)
	}
	return out.Runs, nil
}

// complete completes a run and returns the HTTP status and the outcome.
func (x *executor) complete(ctx context.Context, runID string) (int, string, error) {
	var out struct {
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
	}
	code, err := x.post(ctx, "/complete", map[string]any{"executor": x.id, "run_id": runID, "result": map[string]any{"ok": true}}, &out)
	return code, out.Outcome + out.Error, err
}

// drain runs the executor with slots slots until n runs have completed: a
// taker asks for as many runs as slots are free, and each run taken is
// completed by a goroutine of its own, whose slot frees when the complete
// is answered. Completes answered 202 count as done (the caller checks the
// tasks); those answered otherwise do not (the task is run again).
func (x *executor) drain(ctx context.Context, n, slots int, takes []int64) (conflicts, pending int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan struct{}, slots)
	for range slots {
		free <- struct{}{}
	}
	var done, conf, pend atomic.Int64
	allDone := make(chan struct{})
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { // the last complete ends the take in flight
		select {
		case <-allDone:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-free:
		case <-allDone:
			return conf.Load(), pend.Load(), nil
		case <-ctx.Done():
			select {
			case <-allDone:
				return conf.Load(), pend.Load(), nil
			default:
			}
			return conf.Load(), pend.Load(), cmpErr(firstErr, ctx.Err())
		}
		k := 1
	more:
		for k < slots {
			select {
			case <-free:
				k++
			default:
				break more
			}
		}
		runs, err := x.take(ctx, k, 2*time.Second)
		if err != nil {
			select {
			case <-allDone:
				return conf.Load(), pend.Load(), nil
			default:
			}
			fail(err)
			return conf.Load(), pend.Load(), cmpErr(firstErr, err)
		}
		if len(runs) < len(takes) {
			takes[len(runs)]++
		}
		for range k - len(runs) {
			free <- struct{}{}
		}
		for _, r := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { free <- struct{}{} }()
				code, outcome, err := x.complete(ctx, r.RunID)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						fail(fmt.Errorf("complete %s: %w", r.Key, err))
					}
					return
				case code == http.StatusAccepted:
					pend.Add(1)
				case code != http.StatusOK || outcome != "succeeded":
					conf.Add(1)
					return
				}
				if done.Add(1) == int64(n) {
					close(allDone)
				}
			}()
		}
	}
}

func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// newBenchGateway serves a gateway on db, as the brief's configuration.
func newBenchGateway(b *testing.B, db *mongo.Database, coll string, logs *logCounter) (*gateway.Gateway, *httptest.Server) {
	gw, err := gateway.New(db, &gateway.Config{
		Collections: []string{coll},
		Capacity:    benchCapacity, WorkerID: "bench-gateway", Logger: slog.New(logs),
		Consumer: mscheduler.ConsumerConfig{PollInterval: benchPollInterval},
	})
	if err != nil {
		b.Fatal(err)
	}
	return gw, httptest.NewServer(gw)
}

func stopBenchGateway(b *testing.B, gw *gateway.Gateway, srv *httptest.Server, tr *http.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := gw.Stop(ctx)
	srv.Close()
	tr.CloseIdleConnections()
	if err != nil {
		b.Fatal(err)
	}
}

// drainGateway drains a fresh backlog of n tasks through a gateway.
func drainGateway(b *testing.B, n int) drainStats {
	b.StopTimer()
	e := newDrainEnv(b, "gateway", n)
	ctx, cancel := context.WithTimeout(b.Context(), benchStall)
	defer cancel()
	gw, srv := newBenchGateway(b, e.client.Database(mschedulertest.Database), e.name, e.logs)
	x, tr := newExecutor(srv, e.name, "bench-executor")

	b.StartTimer()
	started := e.start()
	var takes [benchCapacity + 1]int64
	conflicts, pending, err := x.drain(ctx, n, benchCapacity, takes[:])
	if err != nil {
		b.Fatalf("gateway: %v", err)
	}
	if pending > 0 { // some ends were not confirmed within EndWait: wait for them
		for {
			ok, err := e.coll.CountDocuments(ctx, bson.D{{Key: "status", Value: mscheduler.StatusSucceeded}})
			if err != nil {
				b.Fatal(err)
			}
			if ok == int64(n) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := e.stop(started, n)
	b.StopTimer()

	stopBenchGateway(b, gw, srv, tr)
	st.conflicts, st.pending, st.logs, st.takes = conflicts, pending, e.logs.snapshot(), takes
	e.finish(n)
	return st
}

// drainResults keeps BenchmarkDrain/consumer's figures for /gateway to
// compare with.
var drainResults = struct {
	sync.Mutex
	consumer drainStats
}{}

// BenchmarkDrain drains a backlog with the Go consumer and through the
// gateway; /gateway also reports its throughput as a share of the
// consumer's ("x-consumer") and the commands per task it sends beyond it.
func BenchmarkDrain(b *testing.B) {
	n := *benchBacklog
	b.Run("consumer", func(b *testing.B) {
		var all drainStats
		for b.Loop() {
			st := drainConsumer(b, n)
			b.Logf("consumer: %s", st)
			all.add(st)
			b.StartTimer()
		}
		all.report(b)
		drainResults.Lock()
		drainResults.consumer = all
		drainResults.Unlock()
	})
	b.Run("gateway", func(b *testing.B) {
		var all drainStats
		for b.Loop() {
			st := drainGateway(b, n)
			b.Logf("gateway: %s", st)
			all.add(st)
			b.StartTimer()
		}
		all.report(b)
		drainResults.Lock()
		c := drainResults.consumer
		drainResults.Unlock()
		if c.tasks > 0 { // the consumer ran first in this run: compare
			b.ReportMetric(all.tasksPerSec()/c.tasksPerSec(), "x-consumer")
			b.ReportMetric(all.cmdsPerTask()-c.cmdsPerTask(), "extra-cmds/task")
			b.Logf("gateway/consumer: throughput %.2f× (%.1f against %.1f tasks/s; target ≥ 0.9×), commands per task %+.3f (%.3f against %.3f; target ≤ +0.1), runs released unrun %d (target 0)",
				all.tasksPerSec()/c.tasksPerSec(), all.tasksPerSec(), c.tasksPerSec(), all.cmdsPerTask()-c.cmdsPerTask(), all.cmdsPerTask(), c.cmdsPerTask(), all.logs["run released"])
		}
	})
}

// BenchmarkGatewayRatio drains a backlog with both sides in each
// iteration, alternating which goes first, and reports the gateway's
// throughput as a share of the consumer's ("ratio"; target ≥ 0.8) and the
// commands per task it sends beyond the consumer ("extra-cmds/task";
// target ≤ 1).
func BenchmarkGatewayRatio(b *testing.B) {
	n := *benchBacklog
	var cons, gw drainStats
	i := 0
	for b.Loop() {
		var c, g drainStats
		if i%2 == 0 {
			c = drainConsumer(b, n)
			g = drainGateway(b, n)
		} else {
			g = drainGateway(b, n)
			c = drainConsumer(b, n)
		}
		b.Logf("iteration %d: gateway/consumer %.2f× (%.1f against %.1f tasks/s), commands per task %+.3f", i+1,
			g.tasksPerSec()/c.tasksPerSec(), g.tasksPerSec(), c.tasksPerSec(), g.cmdsPerTask()-c.cmdsPerTask())
		cons.add(c)
		gw.add(g)
		b.StartTimer()
		i++
	}
	b.ReportMetric(gw.tasksPerSec()/cons.tasksPerSec(), "ratio")
	b.ReportMetric(cons.tasksPerSec(), "consumer-tasks/s")
	b.ReportMetric(gw.tasksPerSec(), "gateway-tasks/s")
	b.ReportMetric(cons.cmdsPerTask(), "consumer-cmds/task")
	b.ReportMetric(gw.cmdsPerTask(), "gateway-cmds/task")
	b.ReportMetric(gw.cmdsPerTask()-cons.cmdsPerTask(), "extra-cmds/task")
	b.Logf("consumer: %s", cons)
	b.Logf("gateway:  %s", gw)
}

// latencies summarises publish-to-start latencies.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var total time.Duration
	for _, d := range s {
		total += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(total/time.Duration(len(s))), "ms/op")
	b.ReportMetric(ms(s[len(s)/2]), "p50-ms")
	b.ReportMetric(ms(s[len(s)-1]), "max-ms")
	b.Logf("%d tasks: mean %.1f ms, p50 %.1f ms, max %.1f ms", len(s), ms(total/time.Duration(len(s))), ms(s[len(s)/2]), ms(s[len(s)-1]))
}

// idleGap is the pause before each latency sample: the worker is idle
// again, and the publish falls anywhere in the poll cycle.
func idleGap(i int) time.Duration {
	return benchPollInterval + time.Duration(i*7919%50)*time.Millisecond
}

// newLatencyColl is a fresh, empty collection and a producer on it.
func newLatencyColl(b *testing.B, side string) (*mongo.Collection, *mscheduler.Producer[bson.M], func()) {
	b.Helper()
	name := fmt.Sprintf("bench_lat_%s_%s", side, randomSuffix())
	coll := mschedulertest.Client().Database(mschedulertest.Database).Collection(name)
	if err := mscheduler.EnsureIndexes(b.Context(), coll); err != nil {
		b.Fatal(err)
	}
	p, err := mscheduler.NewProducer[bson.M](coll, nil)
	if err != nil {
		b.Fatal(err)
	}
	return coll, p, func() {
		for _, c := range []string{name, name + ".runs", name + ".meta"} {
			_ = coll.Database().Collection(c).Drop(context.Background())
		}
	}
}

func publishOne(b *testing.B, p *mscheduler.Producer[bson.M], key string) time.Time {
	b.Helper()
	at := time.Now()
	if _, err := p.Publish(b.Context(), mscheduler.Task[bson.M]{Key: key, Params: bson.M{}}, nil); err != nil {
		b.Fatal(err)
	}
	return at
}

// BenchmarkLatency measures publish → start with one task at a time.
func BenchmarkLatency(b *testing.B) {
	b.Run("consumer", benchLatencyConsumer)
	b.Run("gateway", func(b *testing.B) { benchLatencyGateway(b, benchCapacity) })
	b.Run("gateway-max1", func(b *testing.B) { benchLatencyGateway(b, 1) })
}

func benchLatencyConsumer(b *testing.B) {
	coll, p, drop := newLatencyColl(b, "consumer")
	defer drop()
	client := mschedulertest.NewClient(b)
	started := make(chan time.Time, 1)
	succeeded := make(chan struct{}, 1)
	c, err := mscheduler.NewConsumer(client.Database(mschedulertest.Database).Collection(coll.Name()),
		func(context.Context, *mscheduler.Task[bson.RawValue]) (bson.RawValue, error) {
			started <- time.Now()
			return bson.RawValue{Type: bson.TypeNull}, nil
		},
		&mscheduler.ConsumerConfig{
			WorkerID: "bench-latency", Capacity: benchCapacity, PollInterval: benchPollInterval,
			Logger: slog.New(newLogCounter(b)),
			OnEvent: func(ev mscheduler.Event) {
				if ev.Kind == mscheduler.EventSucceeded {
					succeeded <- struct{}{}
				}
			},
		})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}()
	time.Sleep(time.Second) // past the start-up looks
	var lat latencies
	k := 0
	for b.Loop() {
		for range *benchLatencySamples {
			time.Sleep(idleGap(k))
			at := publishOne(b, p, fmt.Sprintf("l%05d", k))
			k++
			select {
			case s := <-started:
				lat = append(lat, s.Sub(at))
			case <-time.After(time.Minute):
				b.Fatal("no run started within a minute")
			}
			<-succeeded
		}
	}
	lat.report(b)
}

// benchLatencyGateway: an executor long-polls for up to maxTake runs;
// each task published is timed until the take's answer reaches the
// executor, which then completes the run and takes again.
func benchLatencyGateway(b *testing.B, maxTake int) {
	coll, p, drop := newLatencyColl(b, "gateway")
	defer drop()
	client := mschedulertest.NewClient(b)
	gw, srv := newBenchGateway(b, client.Database(mschedulertest.Database), coll.Name(), newLogCounter(b))
	x, tr := newExecutor(srv, coll.Name(), "bench-latency")
	defer stopBenchGateway(b, gw, srv, tr)

	ctx, cancel := context.WithCancel(b.Context())
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		for {
			runs, err := x.take(ctx, maxTake, 30*time.Second)
			at := time.Now()
			switch {
			case err != nil:
				errc <- err
				return
			case len(runs) == 0:
				continue
			case len(runs) != 1:
				errc <- fmt.Errorf("took %d runs, want 1", len(runs))
				return
			}
			if code, out, err := x.complete(ctx, runs[0].RunID); err != nil || code != http.StatusOK {
				errc <- fmt.Errorf("complete: %d %s %v", code, out, err)
				return
			}
			got <- at // the next take goes out at once
		}
	}()
	defer func() {
		cancel()
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
	}()
	time.Sleep(time.Second) // the take is in; the pool's start-up looks are done
	var lat latencies
	k := 0
	for b.Loop() {
		for range *benchLatencySamples {
			time.Sleep(idleGap(k)) // the executor's take is in
			at := publishOne(b, p, fmt.Sprintf("l%05d", k))
			k++
			select {
			case s := <-got:
				lat = append(lat, s.Sub(at))
			case err := <-errc:
				errc <- err
				b.Fatal(err)
			case <-time.After(time.Minute):
				b.Fatal("no run taken within a minute")
			}
		}
	}
	lat.report(b)
}
