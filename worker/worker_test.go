package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
)

// TestMain runs the tests against MONGODB_URI, or else against a
// development server started for this test binary.
func TestMain(m *testing.M) {
	if os.Getenv(childWorkerEnv) != "" {
		os.Exit(runChildWorker())
	}
	os.Exit(mschedulertest.Main(m))
}

const (
	testDatabase = mschedulertest.Database
	waitTimeout  = mschedulertest.WaitTimeout
)

// quietLog discards logs unless MSCHEDULER_TEST_LOG is set.
var quietLog = func() *slog.Logger {
	if os.Getenv("MSCHEDULER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// collectionName is a new collection name for the test, dropped at its end.
func collectionName(t *testing.T) string {
	return mschedulertest.Collection(t).Name()
}

// newWorker returns a worker on the test server, closed at the end of the
// test if Run was never called.
func newWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	cfg.URI = mschedulertest.URI()
	cfg.Database = testDatabase
	if cfg.Logger == nil {
		cfg.Logger = quietLog
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := worker.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// runWorker runs w in the background; stop cancels Run's context and
// returns Run's error.
func runWorker(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(cancel)
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("worker not ready in time")
	}
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(waitTimeout):
			t.Fatal("Run did not return after its context was cancelled")
			return nil
		}
	}
}

// fastConsumer is a consumer config with short intervals for tests.
func fastConsumer(ev *mschedulertest.Events) *mscheduler.ConsumerConfig {
	return &mscheduler.ConsumerConfig{PollInterval: 50 * time.Millisecond, OnEvent: ev.Record}
}

func publish[P any](t *testing.T, collection string, tasks ...mscheduler.Task[P]) {
	t.Helper()
	coll := mschedulertest.Client().Database(testDatabase).Collection(collection)
	p, err := mscheduler.NewProducer[P](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishMany(context.Background(), tasks, nil); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

type storedRun struct {
	WorkerID string        `bson:"worker_id"`
	Outcome  string        `bson:"outcome"`
	Error    string        `bson:"error"`
	Result   bson.RawValue `bson:"result"`
}

type storedTask struct {
	Key    string      `bson:"key"`
	Status string      `bson:"status"`
	Runs   []storedRun `bson:"runs"`
}

func readTask(t *testing.T, collection, key string) storedTask {
	t.Helper()
	var st storedTask
	err := mschedulertest.Client().Database(testDatabase).Collection(collection).FindOne(context.Background(), bson.D{{Key: "_id", Value: key}}).Decode(&st)
	if err != nil {
		t.Fatalf("read task %q: %v", key, err)
	}
	return st
}

type sum struct {
	A int `bson:"a"`
	B int `bson:"b"`
}

func add(ctx context.Context, task *mscheduler.Task[sum]) (int, error) {
	return task.Params.A + task.Params.B, nil
}

func TestRunRunsPublishedTasksAndStopsCleanly(t *testing.T) {
	const n = 10
	name := collectionName(t)
	w := newWorker(t, worker.Config{WorkerID: "w1"})
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, name, add, fastConsumer(ev)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	stop := runWorker(t, w)
	if err := worker.Register(w, "other", add, nil); err == nil {
		t.Fatal("Register after Run started: no error")
	}

	var tasks []mscheduler.Task[sum]
	for i := range n {
		tasks = append(tasks, mscheduler.Task[sum]{Key: fmt.Sprintf("add%d", i), Params: sum{i, 100}})
	}
	publish(t, name, tasks...)
	ev.WaitCount(t, mscheduler.EventSucceeded, n)

	if err := stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	for i := range n {
		st := readTask(t, name, fmt.Sprintf("add%d", i))
		if st.Status != "succeeded" || len(st.Runs) != 1 || st.Runs[0].WorkerID != "w1" {
			t.Fatalf("task %d = %+v", i, st)
		}
		var got int
		if err := st.Runs[0].Result.Unmarshal(&got); err != nil || got != i+100 {
			t.Fatalf("task %d result = %d (%v), want %d", i, got, err, i+100)
		}
	}
	counts := w.Counts()
	if counts[mscheduler.EventSucceeded] != n || counts[mscheduler.EventClaimed] != n {
		t.Fatalf("counts = %v, want %d claimed and succeeded", counts, n)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("second Run: no error")
	}
	if err := worker.Register(w, "late", add, nil); err == nil {
		t.Fatal("Register after Run returned: no error")
	}
}

// TestShutdownTimeout: on stop, a handler that finishes within
// ShutdownTimeout is recorded as succeeded; one that does not is cancelled
// with ErrShutdown and its run released.
func TestShutdownTimeout(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{ShutdownTimeout: time.Second})
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	handler := func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "slow" {
			select {
			case <-time.After(300 * time.Millisecond):
				return "done", nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}
		<-ctx.Done() // "stuck" waits for the cancellation
		causes <- context.Cause(ctx)
		return "", context.Cause(ctx)
	}
	if err := worker.Register(w, name, handler, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	publish(t, name, mscheduler.Task[string]{Key: "slow", Params: "slow"}, mscheduler.Task[string]{Key: "stuck", Params: "stuck"})
	ev.WaitCount(t, mscheduler.EventClaimed, 2)
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if took := time.Since(began); took < time.Second {
		t.Fatalf("Run returned %v after the stop, before ShutdownTimeout", took)
	}
	if cause := <-causes; !errors.Is(cause, mscheduler.ErrShutdown) {
		t.Fatalf("stuck handler's cause = %v, want ErrShutdown", cause)
	}
	if st := readTask(t, name, "slow"); st.Status != "succeeded" {
		t.Fatalf("slow = %+v, want succeeded", st)
	}
	if st := readTask(t, name, "stuck"); st.Status != "pending" || len(st.Runs) != 1 || st.Runs[0].Outcome != "released" {
		t.Fatalf("stuck = %+v, want pending with a released run", st)
	}
	if c := w.Counts(); c[mscheduler.EventReleased] != 1 || c[mscheduler.EventSucceeded] != 1 {
		t.Fatalf("counts = %v", c)
	}
}

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Setenv(worker.EnvURI, "")
	for _, tc := range []struct {
		field string
		cfg   worker.Config
	}{
		{"URI", worker.Config{}},
		{"URI", worker.Config{URI: "http://localhost"}},
		{"Database", worker.Config{URI: mschedulertest.URI(), Database: "a.b"}},
		{"Database", worker.Config{URI: mschedulertest.URI(), Database: strings.Repeat("d", 64)}},
		{"WorkerID", worker.Config{URI: mschedulertest.URI(), WorkerID: "host.example"}},
		{"WorkerID", worker.Config{URI: mschedulertest.URI(), WorkerID: "$w"}},
		{"Groups[1]", worker.Config{URI: mschedulertest.URI(), Groups: []string{"gpu", ""}}},
		{"ShutdownTimeout", worker.Config{URI: mschedulertest.URI(), ShutdownTimeout: -time.Second}},
	} {
		w, err := worker.New(context.Background(), tc.cfg)
		if err == nil {
			_ = w.Close()
			t.Errorf("%+v: no error, want one naming %s", tc.cfg, tc.field)
			continue
		}
		var ie *mscheduler.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, mscheduler.ErrInvalid) {
			t.Errorf("%+v: error %v, want an InvalidError naming %s", tc.cfg, err, tc.field)
		}
		if want := "worker: invalid " + tc.field + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message %q does not start with %q", err, want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Setenv(worker.EnvURI, mschedulertest.URI())
	t.Setenv(worker.EnvDatabase, "mscheduler_worker_env")
	w, err := worker.New(context.Background(), worker.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.URI() != mschedulertest.URI() || w.Database().Name() != "mscheduler_worker_env" {
		t.Fatalf("URI %q, database %q: not from the environment", w.URI(), w.Database().Name())
	}
	host, _ := os.Hostname()
	host = strings.NewReplacer(".", "-", "$", "-").Replace(host)
	if prefix := fmt.Sprintf("%s-%d-", host, os.Getpid()); !strings.HasPrefix(w.ID(), prefix) {
		t.Fatalf("ID = %q, want %s<8 hex digits>", w.ID(), prefix)
	}

	t.Setenv(worker.EnvDatabase, "")
	w2, err := worker.New(context.Background(), worker.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if w2.Database().Name() != worker.DatabaseDefault {
		t.Fatalf("database = %q, want %q", w2.Database().Name(), worker.DatabaseDefault)
	}
}

func TestRegisterErrors(t *testing.T) {
	w := newWorker(t, worker.Config{})
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run with no consumers: no error")
	}
	w = newWorker(t, worker.Config{})
	var ie *mscheduler.InvalidError
	if err := worker.Register[sum, int](w, "c", nil, nil); !errors.As(err, &ie) || ie.Field != "handler" {
		t.Fatalf("nil handler: %v", err)
	}
	if err := worker.Register(w, "", add, nil); !errors.As(err, &ie) || ie.Field != "collection" {
		t.Fatalf("empty collection: %v", err)
	}
	if err := worker.Register(w, "c", add, &mscheduler.ConsumerConfig{Capacity: -1}); !errors.As(err, &ie) || ie.Field != "Capacity" {
		t.Fatalf("bad consumer config: %v", err)
	}
	if err := worker.Register(w, "c", add, nil); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, "c", add, nil); err == nil {
		t.Fatal("same collection twice: no error")
	}
	if err := worker.Register(w, "c", add, &mscheduler.ConsumerConfig{WorkerID: "other"}); err != nil {
		t.Fatalf("same collection under another worker id: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, "d", add, nil); err == nil {
		t.Fatal("Register after Close: no error")
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run after Close: no error")
	}
}

// TestConsumerConfigIsFilled: the worker's id and groups reach the
// consumer, whose runs are recorded under them; the caller's config is not
// modified.
func TestConsumerConfigIsFilled(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{WorkerID: "gpu-box", Groups: []string{"gpu"}})
	ev := mschedulertest.NewEvents()
	cfg := fastConsumer(ev)
	if err := worker.Register(w, name, add, cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.WorkerID != "" || cfg.Groups != nil || cfg.Logger != nil {
		t.Fatalf("Register modified the caller's config: %+v", cfg)
	}
	stop := runWorker(t, w)
	publish(t, name, mscheduler.Task[sum]{Key: "g", Group: "gpu"})
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := readTask(t, name, "g"); st.Status != "succeeded" || st.Runs[0].WorkerID != "gpu-box" {
		t.Fatalf("task = %+v", st)
	}
}

// TestDevServerOption: with no URI and DevServer set, New starts the
// development server and Run stops it when it returns.
func TestDevServerOption(t *testing.T) {
	t.Setenv(worker.EnvURI, "")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := worker.New(ctx, worker.Config{DevServer: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.URI() == "" || w.URI() == mschedulertest.URI() {
		t.Fatalf("URI = %q, want a server of its own", w.URI())
	}
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, "dev", add, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	probe, err := mongo.Connect(options.Client().ApplyURI(w.URI()).SetServerSelectionTimeout(500 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Disconnect(context.Background())
	if err := probe.Ping(ctx, nil); err == nil {
		t.Fatal("the development server still answers after Run returned")
	}
}

// TestTwoWorkersShareACollection: two worker processes (here, two workers
// with their own clients) on one collection both start and share the work.
// Both create the indexes, which must be idempotent.
func TestTwoWorkersShareACollection(t *testing.T) {
	const n = 20
	name := collectionName(t)
	ev := mschedulertest.NewEvents()
	// Handlers hold their slots until both workers have claimed, so that
	// neither can take every task before the other starts.
	shared := make(chan struct{})
	var stops []func() error
	for _, id := range []string{"a", "b"} {
		w := newWorker(t, worker.Config{WorkerID: id})
		cfg := fastConsumer(ev)
		cfg.Capacity = 2
		if err := worker.Register(w, name, func(ctx context.Context, task *mscheduler.Task[sum]) (int, error) {
			select {
			case <-shared:
			case <-ctx.Done():
			}
			return 0, nil
		}, cfg); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, runWorker(t, w))
	}
	var tasks []mscheduler.Task[sum]
	for i := range n {
		tasks = append(tasks, mscheduler.Task[sum]{Key: fmt.Sprintf("t%d", i)})
	}
	publish(t, name, tasks...)
	ev.WaitFor(t, "claims by both workers", func(evs []mscheduler.Event) bool {
		by := map[string]bool{}
		for _, e := range evs {
			if e.Kind == mscheduler.EventClaimed {
				by[e.WorkerID] = true
			}
		}
		return by["a"] && by["b"]
	})
	close(shared)
	ev.WaitCount(t, mscheduler.EventSucceeded, n)
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if c := ev.Count(mscheduler.EventClaimed); c != n {
		t.Fatalf("%d claims, want %d", c, n)
	}
}

// TestSkipIndexes: a worker with SkipIndexes creates no index.
func TestSkipIndexes(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{SkipIndexes: true})
	if err := worker.Register(w, name, add, fastConsumer(mschedulertest.NewEvents())); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	specs, err := mschedulertest.Client().Database(testDatabase).Collection(name).Indexes().ListSpecifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name != "_id_" {
			t.Fatalf("index %s was created", s.Name)
		}
	}
}

// TestAbandonedHandlersAreCounted: a handler that ignores its context past
// its timeout and the grace period is counted by Abandoned until it returns.
func TestAbandonedHandlersAreCounted(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{})
	ev := mschedulertest.NewEvents()
	unblock := make(chan struct{})
	returned := make(chan struct{})
	handler := func(context.Context, *mscheduler.Task[string]) (string, error) {
		defer close(returned)
		<-unblock // ignores its context
		return "", nil
	}
	cfg := fastConsumer(ev)
	cfg.TimeoutGrace = 100 * time.Millisecond
	if err := worker.Register(w, name, handler, cfg); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	publish(t, name, mscheduler.Task[string]{Key: "stuck", Timeout: 100 * time.Millisecond, MaxRetries: mscheduler.NoRetries})
	ev.WaitCount(t, mscheduler.EventAbandoned, 1)
	if n := w.Abandoned(); n != 1 {
		t.Fatalf("Abandoned() = %d while the handler is stuck, want 1", n)
	}
	close(unblock)
	<-returned
	// The count drops when the goroutine's wrapper sees the handler return,
	// just after the handler's own deferred close.
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for w.Abandoned() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Abandoned() = %d after the handler returned, want 0", w.Abandoned())
		}
		time.Sleep(time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// lineLog is a logger whose lines a test can wait for.
type lineLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan struct{} // buffered 1: a line was written
}

func newLineLog() *lineLog { return &lineLog{lines: make(chan struct{}, 1)} }

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.lines <- struct{}{}:
	default:
	}
	return l.buf.Write(p)
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the log holds text.
func (l *lineLog) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for !strings.Contains(l.String(), text) {
		select {
		case <-l.lines:
		case <-deadline:
			t.Fatalf("the log never said %q:\n%s", text, l.String())
		}
	}
}

// TestRunWaitsForTheServer: a worker started while its server is down
// does not exit: Run tries its start again with backoff, saying so in the
// log, and runs tasks once the server is there.
func TestRunWaitsForTheServer(t *testing.T) {
	name := collectionName(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the "server" comes up
	log := newLineLog()
	w, err := worker.New(context.Background(), worker.Config{
		URI: "mongodb://" + addr + "/?directConnection=true&serverSelectionTimeoutMS=300", Database: testDatabase,
		Logger: slog.New(slog.NewJSONHandler(log, nil)),
	})
	if err != nil {
		t.Fatalf("New with the server down: %v", err)
	}
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, name, add, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	log.waitFor(t, "server unreachable; trying the start again")
	log.waitFor(t, `"attempt":2`)

	// The server comes up on the address the worker was given.
	up, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on the port picked for the server (another process took it meanwhile?): %v", err)
	}
	t.Cleanup(func() { up.Close() })
	go forward(up, serverHost(t))
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run returned before it started: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("the worker never started once the server was up")
	}
	publish(t, name, mscheduler.Task[sum]{Key: "k", Params: sum{A: 1, B: 2}})
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want a clean stop", err)
	}
}

// serverHost is the host:port of the single-host test server.
func serverHost(t *testing.T) string {
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the test forwards to a single host", len(hosts))
	}
	return hosts[0]
}

// forward relays every connection ln accepts to target.
func forward(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
	}
}

// TestSlowStartGetsLongerDeadlines: every index the worker creates at its
// start takes 100 ms more, so that its start takes several times the
// first attempt's deadline. The worker says the server is slow (not
// unreachable), tries again with longer deadlines, and starts.
func TestSlowStartGetsLongerDeadlines(t *testing.T) {
	name := collectionName(t)
	proxy, err := mschedulertest.StartDelayProxy(serverHost(t), func(command string, _ time.Duration) time.Duration {
		if command == "createIndexes" {
			return 100 * time.Millisecond
		}
		return 0
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	log := newLineLog()
	w, err := worker.New(context.Background(), worker.Config{URI: proxy.URI(), Database: testDatabase, Logger: slog.New(slog.NewJSONHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	worker.SetFirstStartTimeout(w, 250*time.Millisecond)
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, name, add, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	if said := log.String(); !strings.Contains(said, "server slow: the start took longer than its deadline") || strings.Contains(said, "server unreachable") {
		t.Errorf("the log does not say the server was slow, or calls it unreachable:\n%s", said)
	}
	publish(t, name, mscheduler.Task[sum]{Key: "k", Params: sum{A: 1, B: 2}})
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want a clean stop", err)
	}
}
