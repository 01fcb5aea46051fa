package soak

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

var (
	longFlag = flag.Bool("soak.long", false, "run the long soak: 1,000 tasks over a longer window")
	seedFlag = flag.Uint64("soak.seed", 0, "seed of the task mix and the faults; 0 picks one from the clock")
	dirFlag  = flag.String("soak.dir", "", "keep the server data, handler logs and worker logs in this directory")
	// The default is above 300 ms: a consumer claims nothing in a pass
	// that starts after its next sweep is due, and on the saturated
	// development server a sweep often takes longer than 300 ms (see the
	// package documentation).
	sweepFlag = flag.Duration("soak.sweep", time.Second, "SweepInterval of the workers")
	// delayFlag puts a mschedulertest.DelayProxy between the workers and
	// the server (the soak's own checks go direct), and skips the server
	// restart: every lease lost by a live worker is then a failure.
	delayFlag = flag.String("soak.server-delay", "", `hold every command of the workers this long: "1s", "300ms-800ms", "0s..2s/1m"`)
)

// TestMain makes the test binary a worker process when the soak starts it
// as one.
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(runWorkerProcess())
	}
	if label := os.Getenv(envGwExecutor); label != "" {
		os.Exit(runGatewayExecutorProcess(label))
	}
	os.Exit(m.Run())
}

// mix is how many tasks of each kind the soak publishes, and its timing.
type mix struct {
	quick, slow, retry, fail, conc, distinct, recurring int

	waves    int           // the tasks are published in this many waves of mixed kinds
	window   time.Duration // the due times (and plan starts) of a wave are spread over it
	deadline time.Duration // every task must be final within it of the first publish: a bound, not the expected time
	// archive moves final tasks out of the collection (a snapshot is kept
	// for the checks), so that the development server, which scans the
	// collection for every query but one by _id alone, stays fast enough
	// for short leases. The next wave is published once no more than a wave
	// of tasks is left in the collection.
	archive bool
}

var (
	shortMix = mix{quick: 72, slow: 30, retry: 18, fail: 8, conc: 8, distinct: 8, recurring: 6,
		waves: 1, window: 40 * time.Second, deadline: 6 * time.Minute}
	longMix = mix{quick: 480, slow: 200, retry: 110, fail: 50, conc: 55, distinct: 55, recurring: 50,
		waves: 10, window: 20 * time.Second, deadline: 25 * time.Minute, archive: true}
)

func (m mix) total() int {
	return m.quick + m.slow + m.retry + m.fail + m.conc + m.distinct + m.recurring
}

const (
	workers      = 4
	skewedSlot   = workers - 1 // this slot's clock is always 30 s fast
	clockSkew    = 30 * time.Second
	killEvery    = 2 * time.Second // plus up to killJitter
	killJitter   = 2 * time.Second
	faultTail    = 15 * time.Second // kills go on this long past the last wave's window
	pollEvery    = 500 * time.Millisecond
	pollBatch    = 2000 // documents a poll reads in one reply
	readyTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
	opTimeout    = 30 * time.Second
	// historyDeadline bounds the wait for the history records left by
	// killed workers (written by the maintenance pass after 10 s).
	historyDeadline = time.Minute
	archiveBatch    = 200
	soakDatabase    = "mscheduler_soak"
	serverStartup   = 15 * time.Minute // a first build of the development server takes minutes
	// soakLease is the lease of the slow and concurrency-2 tasks: short, so
	// that killed runs are taken over fast, yet well above the latency of
	// the development server's commands when CI loads both CPUs (a ping
	// slower than the lease left to it loses the run, as it must).
	soakLease = 2500 * time.Millisecond
	// serverDown is how long the killed server stays down: longer than the
	// leases, so that live workers' pings fail until their leases lapse.
	serverDown = 3 * time.Second
)

// spec is what the soak expects of one task.
type spec struct {
	key         string
	kind        string
	concurrency int
	distinct    bool
	repeat      int // recurring: runs of the plan
	maxFailed   int
}

// plannedTask is a task before its wave is published: its due time (or
// plan start) is offset from the wave's start.
type plannedTask struct {
	task   mscheduler.Task[params]
	offset time.Duration
}

// at is the task as published in a wave that starts at base.
func (p plannedTask) at(base time.Time) mscheduler.Task[params] {
	t := p.task
	if t.Plan != nil {
		plan := *t.Plan
		plan.Start = base.Add(p.offset).Truncate(time.Second)
		t.Plan = &plan
	} else {
		t.RunAt = base.Add(p.offset)
	}
	return t
}

// buildTasks makes the task mix from the seed, in a random order.
func buildTasks(m mix, rng *rand.Rand) ([]plannedTask, map[string]spec) {
	var tasks []plannedTask
	specs := map[string]spec{}
	quickMS := func() int { return 10 + rng.IntN(41) }
	add := func(kind string, n int, f func(t *mscheduler.Task[params], s *spec)) {
		for i := range n {
			key := fmt.Sprintf("%s-%04d", kind, i)
			t := mscheduler.Task[params]{Key: key, Params: params{Kind: kind}, MaxFailedRuns: 20, Description: "soak " + kind}
			s := spec{key: key, kind: kind, concurrency: 1}
			f(&t, &s)
			s.maxFailed = t.MaxFailedRuns
			tasks = append(tasks, plannedTask{task: t, offset: time.Duration(rng.Int64N(int64(m.window)))})
			specs[key] = s
		}
	}
	add(kindQuick, m.quick, func(t *mscheduler.Task[params], _ *spec) {
		t.Params.DurMS = quickMS()
	})
	add(kindSlow, m.slow, func(t *mscheduler.Task[params], _ *spec) {
		t.Params.DurMS = 1000 + rng.IntN(2001)
		t.PingInterval, t.WorkerTimeout = 250*time.Millisecond, soakLease
	})
	add(kindRetry, m.retry, func(t *mscheduler.Task[params], _ *spec) {
		t.Params.DurMS = quickMS()
		t.MaxRetries, t.RetryDelay = 2, 100*time.Millisecond
	})
	add(kindFail, m.fail, func(t *mscheduler.Task[params], _ *spec) {
		t.Params.DurMS = quickMS()
		t.MaxRetries, t.RetryDelay, t.MaxFailedRuns = 1, 100*time.Millisecond, 3
	})
	for _, kind := range []string{kindConc, kindDistinct} {
		n := m.conc
		if kind == kindDistinct {
			n = m.distinct
		}
		add(kind, n, func(t *mscheduler.Task[params], s *spec) {
			t.Params.DurMS = 200 + rng.IntN(601)
			t.PingInterval, t.WorkerTimeout = 250*time.Millisecond, soakLease
			t.Concurrency, t.DistinctWorkers = 2, kind == kindDistinct
			s.concurrency, s.distinct = 2, t.DistinctWorkers
		})
	}
	add(kindRecurring, m.recurring, func(t *mscheduler.Task[params], s *spec) {
		plan := mscheduler.Every(1, mscheduler.Second)
		plan.Repeat = 8 + rng.IntN(3)
		// Planned times are due every second: ahead of the backlog of
		// older due times, as a schedule would be in production.
		t.Plan, t.Priority, t.Params.DurMS = &plan, 1, quickMS()
		s.repeat = plan.Repeat
	})
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks, specs
}

// server is the development server the soak owns, restarted in place.
type server struct {
	dir, addr string
	stderr    *os.File

	mu  sync.Mutex
	cur *devserver.Server
}

func startServer(t *testing.T, dir string) *server {
	t.Helper()
	addr, err := fixedPort()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{dir: filepath.Join(dir, "data"), addr: addr}
	if s.stderr, err = os.Create(filepath.Join(dir, "devserver.stderr")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cur != nil {
			if err := s.cur.Stop(); err != nil {
				t.Logf("stop the development server: %v", err)
			}
		}
		_ = s.stderr.Close()
	})
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// fixedPort picks a free loopback address for the server, on a port below
// the kernel's ephemeral range: while the server is down, an outgoing
// connection (a worker trying to reconnect) could be given an ephemeral
// port, and the server could then not listen on it again.
func fixedPort() (string, error) {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(low-10000)))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			_ = ln.Close()
			return addr, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (s *server) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), serverStartup)
	defer cancel()
	srv, err := devserver.Start(ctx, devserver.Options{Dir: s.dir, Addr: s.addr, Stderr: s.stderr})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cur = srv
	s.mu.Unlock()
	return nil
}

func (s *server) uri() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.URI()
}

// restart kills the server as a crash would and starts a new one on the same
// data and address; it returns how long the server was down.
func (s *server) restart() (time.Duration, error) {
	s.mu.Lock()
	old := s.cur
	s.cur = nil
	s.mu.Unlock()
	began := time.Now()
	if err := old.Kill(); err != nil {
		return 0, err
	}
	_ = old.Stop()         // reports nothing after Kill; removes nothing (Dir was given)
	time.Sleep(serverDown) // the outage itself: its length is the fault, not a wait for something
	var err error
	for try := 0; try < 5; try++ {
		if err = s.start(); err == nil {
			return time.Since(began), nil
		}
		time.Sleep(2 * time.Second) // back off before the next start attempt
	}
	return time.Since(began), fmt.Errorf("start the development server again on %s: %w", s.addr, err)
}

// faults are what the soak did to the system.
type faults struct {
	kills    int
	restarts int
	downtime time.Duration
}

// soakEnv is what a soak sets up before its loop: the server, the
// collection, the worker pool (every slot ready) and the task mix.
type soakEnv struct {
	seed     uint64
	rng      *rand.Rand
	began    time.Time
	logDir   string
	srv      *server // nil when the server is not the soak's own
	uri      string
	coll     *mongo.Collection
	pool     *workerPool
	producer *mscheduler.Producer[params]
	tasks    []plannedTask
	specs    map[string]spec
}

// setUp starts the server (unless MONGODB_URI names one), creates the
// collection prefix_<seed>_<clock>, starts the workers with env's settings
// (uri, db, coll and dir are filled in) and waits until all are ready, and
// builds the task mix. what is logged with the seed. With -soak.dir, the
// server data and the logs go in its subdirectory sub ("": the directory
// itself), so that two soaks run by one command keep theirs apart.
func setUp(t *testing.T, m mix, prefix, sub, what string, env workerEnv) *soakEnv {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("%s, seed %d (rerun with -soak.seed=%d), workers' SweepInterval %s", what, seed, seed, env.sweep)
	e := &soakEnv{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), began: time.Now()}

	var dir string
	if *dirFlag == "" {
		dir = t.TempDir()
	} else {
		dir = filepath.Join(*dirFlag, sub)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.logDir = filepath.Join(dir, "logs")
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		t.Fatal(err)
	}

	e.uri = os.Getenv("MONGODB_URI")
	if e.uri == "" {
		e.srv = startServer(t, dir)
		e.uri = e.srv.uri()
		t.Logf("development server at %s, data in %s", e.uri, e.srv.dir)
	} else {
		t.Log("MONGODB_URI is set: the soak uses that server and skips the server-restart fault")
	}

	client, err := mongo.Connect(options.Client().ApplyURI(e.uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	e.coll = client.Database(soakDatabase).Collection(fmt.Sprintf("%s_%d_%d", prefix, seed%1_000_000, time.Now().UnixNano()%1_000_000))
	if e.srv == nil && *dirFlag == "" {
		t.Cleanup(func() { _ = e.coll.Drop(context.Background()) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err = mscheduler.EnsureIndexes(ctx, e.coll)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	if env.exe, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	env.uri, env.db, env.coll, env.dir = e.uri, soakDatabase, e.coll.Name(), e.logDir
	if !env.direct {
		env.uri = splitURI(t, e.uri)
	}
	if *delayFlag != "" {
		env.uri = slowURI(t, env.uri, *delayFlag)
	}
	skews := make([]time.Duration, workers)
	skews[skewedSlot] = clockSkew
	e.pool = newWorkerPool(t, env, skews)
	for slot := range workers {
		e.pool.start(slot)
	}
	for _, p := range e.pool.current() {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Fatalf("worker %s exited before it was ready: %v\n%s", p.id, p.err, p.stderrTail())
		case <-time.After(readyTimeout):
			t.Fatalf("worker %s not ready within %s\n%s", p.id, readyTimeout, p.stderrTail())
		}
	}

	e.tasks, e.specs = buildTasks(m, e.rng)
	if e.producer, err = mscheduler.NewProducer[params](e.coll, &mscheduler.ProducerConfig{Defaults: mscheduler.TaskDefaults{Source: "soak"}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// newRun is the loop of a soak over e's task mix.
func (e *soakEnv) newRun(t *testing.T, m mix) *run {
	return &run{t: t, m: m, rng: e.rng, coll: e.coll, producer: e.producer, pool: e.pool, srv: e.srv, specs: e.specs,
		waves: slices.Collect(slices.Chunk(e.tasks, (len(e.tasks)+m.waves-1)/m.waves)), archived: map[string]*storedTask{}}
}

// stopWorkers stops the workers gracefully, all at once, and reports any
// incarnation that exited on its own.
func (e *soakEnv) stopWorkers(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	for _, p := range e.pool.current() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.terminate(stopTimeout); err != nil {
				t.Errorf("worker %s after SIGTERM: %v\n%s", p.id, err, p.stderrTail())
			}
		}()
	}
	wg.Wait()
	for _, p := range e.pool.incarnations() {
		if p.unexpectedExit() {
			t.Errorf("worker %s exited on its own: %v\n%s", p.id, p.err, p.stderrTail())
		}
	}
}

// handlerRuns reads the handler logs of every incarnation, and returns the
// set of incarnations.
func (e *soakEnv) handlerRuns(t *testing.T) (map[string]*logRun, map[string]bool) {
	t.Helper()
	var logs []string
	incarnations := map[string]bool{}
	for _, p := range e.pool.incarnations() {
		logs = append(logs, p.logPath)
		incarnations[p.id] = true
	}
	runs, err := readHandlerLogs(logs)
	if err != nil {
		t.Fatalf("handler logs: %v", err)
	}
	return runs, incarnations
}

func TestSoak(t *testing.T) {
	m := shortMix
	form := "short"
	if *longFlag {
		m, form = longMix, "long"
	}
	e := setUp(t, m, "soak", "", fmt.Sprintf("soak: %s form, %d tasks", form, m.total()), workerEnv{sweep: *sweepFlag})
	r := e.newRun(t, m)
	r.noRestart = *delayFlag != ""
	r.loop()
	r.waitHistoryWritten(bson.D{})

	// Every task is final: stop the workers gracefully, all at once.
	e.stopWorkers(t)

	docs := readTasks(t, e.coll)
	for key, d := range r.archived {
		if docs[key] == nil { // else its delete failed: the stored one is as good
			docs[key] = d
		}
	}
	runs, incarnations := e.handlerRuns(t)
	v := &verifier{t: t, specs: e.specs, docs: docs, runs: runs, workers: incarnations, history: readHistory(t, e.coll)}
	sum := v.verify()
	sum.log(t, r.faults, time.Since(e.began), e.seed, len(e.pool.incarnations()), len(r.archived))
	if *delayFlag != "" {
		checkNoLeaseLost(t, e.pool)
	}
}

// splitURI starts a HoldProxy that splits updates in front of the
// server of uri and returns a URI through it: the workers' batch claims and
// batched run ends reach the server statement by statement, with other
// workers' commands between them, as MongoDB applies them (the development
// server runs each command whole). A URI of several hosts is used as it is.
func splitURI(t *testing.T, uri string) string {
	t.Helper()
	hosts := options.Client().ApplyURI(uri).Hosts
	if len(hosts) != 1 {
		return uri
	}
	p, err := mschedulertest.StartHoldProxy(hosts[0], mschedulertest.HoldOptions{Split: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	start := time.Now()
	t.Cleanup(func() { t.Log(commandRates(p.Since(0), time.Since(start))) })
	return p.URI()
}

// commandRates sums up the workers' commands by name and collection, most
// frequent first, per second of the soak: what watching and working cost
// the server.
func commandRates(cmds []mschedulertest.Command, d time.Duration) string {
	counts := map[string]int{}
	for _, c := range cmds {
		counts[strings.TrimSpace(c.Name+" "+c.Collection)]++
	}
	kinds := slices.Collect(maps.Keys(counts))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var b strings.Builder
	fmt.Fprintf(&b, "summary: the workers' commands, %d in %s (%.1f/s):", len(cmds), d.Round(time.Second), float64(len(cmds))/d.Seconds())
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %.2f/s;", cond(k != "", k, "(unnamed)"), float64(counts[k])/d.Seconds())
	}
	return b.String()
}

// slowURI starts a DelayProxy in front of the server of uri and returns a
// URI through it.
func slowURI(t *testing.T, uri, delay string) string {
	t.Helper()
	d, err := mschedulertest.ParseDelay(delay)
	if err != nil {
		t.Fatalf("-soak.server-delay: %v", err)
	}
	hosts := options.Client().ApplyURI(uri).Hosts
	if len(hosts) != 1 {
		t.Fatalf("-soak.server-delay: the server URI names %d hosts; the proxy stands in front of one", len(hosts))
	}
	p, err := mschedulertest.StartDelayProxy(hosts[0], d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	t.Logf("every command of the workers held %s on its way to the server (a proxy at %s)", delay, p.Addr())
	return p.URI()
}

// checkNoLeaseLost fails the test for each lease a worker lost while it
// lived: with no server restart, only a killed worker's runs may lapse,
// and a killed worker logs nothing more.
func checkNoLeaseLost(t *testing.T, pool *workerPool) {
	t.Helper()
	lost := 0
	eachLogLine(t, pool, func(p *workerProc, line []byte) {
		if rec, ok := logLine(line); ok && rec.Msg == "lease lost; handler cancelled" {
			lost++
			t.Errorf("worker %s lost a lease while it lived: %s", p.id, line)
		}
	})
	t.Logf("leases lost by live workers through the slow server: %d", lost)
}

// run is the soak while it runs: waves of tasks, faults, archiving.
type run struct {
	t        *testing.T
	m        mix
	rng      *rand.Rand
	coll     *mongo.Collection
	producer *mscheduler.Producer[params]
	pool     *workerPool
	srv      *server // nil when the server is not the soak's own
	specs    map[string]spec

	waves     [][]plannedTask
	published int // waves published
	firstAt   time.Time
	restartAt time.Time // when the server restart is due: mid-run
	faultEnd  time.Time // kills stop then, so that the tail drains
	archived  map[string]*storedTask
	faults    faults
	outage    span // when the server was down (restarted)

	// Set by a soak that needs them before loop; TestSoak leaves them.
	noRestart   bool                                     // no server restart
	steadyKills bool                                     // a kill every killEvery exactly, not up to killJitter later
	pollEvery   time.Duration                            // how often the loop reads the collection; 0: pollEvery
	done        func(d liveTask) bool                    // a task is done; nil: its status is final (isFinal)
	polled      func(live liveTasks, took time.Duration) // called with every poll that read the collection, and its round trip
	tick        func(now time.Time)                      // called at every tick of the loop, after the poll
	doneNames   []string                                 // the statuses done, for the deadline's message; nil: the final ones
	explain     func(d liveTask) string                  // more about a task not done, for the deadline's message
}

// isDone says a task is done, as the soak sees it.
func (r *run) isDone(d liveTask) bool {
	if r.done != nil {
		return r.done(d)
	}
	return isFinal(d.Status)
}

// publishWave publishes the next wave; its due times start 2 s from now.
func (r *run) publishWave() {
	r.t.Helper()
	wave := r.waves[r.published]
	began := time.Now()
	base := began.Add(2 * time.Second)
	for batch := range slices.Chunk(wave, 100) {
		tasks := make([]mscheduler.Task[params], len(batch))
		for i, p := range batch {
			tasks[i] = p.at(base)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := r.producer.PublishMany(ctx, tasks, nil)
		cancel()
		if err != nil {
			r.t.Fatalf("publish: %v", err)
		}
		for _, res := range res {
			if res.Outcome != mscheduler.PublishInserted {
				r.t.Fatalf("publish %s: %s, want inserted", res.Key, res.Outcome)
			}
		}
	}
	if r.published == 0 {
		r.firstAt = began
	}
	if r.published == len(r.waves)/2 {
		r.restartAt = base.Add(r.m.window / 2)
	}
	r.published++
	if r.published == len(r.waves) {
		r.faultEnd = base.Add(r.m.window + faultTail)
	}
	r.t.Logf("t+%s: wave %d/%d: published %d tasks in %s, due over %s from %s",
		r.since(), r.published, len(r.waves), len(wave), time.Since(began).Round(time.Millisecond), r.m.window, base.Format(time.TimeOnly))
}

func (r *run) since() time.Duration {
	if r.firstAt.IsZero() {
		return 0
	}
	return time.Since(r.firstAt).Round(time.Second)
}

// loop publishes the waves and injects the faults while it waits, polling
// the collection, for every task to be final. It fails the test at the
// deadline.
func (r *run) loop() {
	t := r.t
	t.Helper()
	r.publishWave()
	deadline := r.firstAt.Add(r.m.deadline)
	nextKill := func() time.Time {
		if r.steadyKills {
			return time.Now().Add(killEvery)
		}
		return time.Now().Add(killEvery + time.Duration(r.rng.Int64N(int64(killJitter))))
	}
	killAt := nextKill()
	lastProgress := time.Now()
	tick := time.NewTicker(cmp.Or(r.pollEvery, pollEvery))
	defer tick.Stop()
	pollErrors := 0
	for {
		<-tick.C
		for _, p := range r.pool.current() {
			if p.unexpectedExit() {
				t.Errorf("worker %s exited on its own: %v\n%s", p.id, p.err, p.stderrTail())
				p.markExpected()
				r.pool.start(p.slot)
			}
		}
		pollStart := time.Now()
		live, err := r.poll()
		if err != nil {
			pollErrors++
		} else if r.polled != nil {
			r.polled(live, time.Since(pollStart))
		}
		if r.tick != nil {
			r.tick(time.Now())
		}
		counts := live.counts()
		done, present := 0, 0 // tasks done; tasks of the mix in the collection
		for _, d := range live {
			if r.isDone(d) {
				done++
			}
			if id, ok := d.ID.StringValueOK(); ok && r.specs[id].key == id {
				present++
			}
		}
		gone := 0 // archived and no longer in the collection
		if r.m.archive {
			inLive := map[string]bool{}
			for _, d := range live {
				inLive[d.Key] = true
			}
			for key := range r.archived {
				if !inLive[key] {
					gone++
				}
			}
			counts["archived"] = gone
		}
		if err == nil && r.published == len(r.waves) && done == len(live) && present+gone == len(r.specs) {
			if pollErrors > 0 {
				t.Logf("%d polls of the collection failed (the server was down)", pollErrors)
			}
			t.Logf("t+%s: every task final: %v", r.since(), counts)
			return
		}
		now := time.Now()
		if now.After(deadline) {
			var notDone []string // as the loop sees them
			for _, d := range live {
				if !r.isDone(d) && len(notDone) < 20 {
					what := d.String()
					if r.explain != nil {
						what += r.explain(d)
					}
					notDone = append(notDone, what)
				}
			}
			t.Fatalf("not every task final within %s of the first publish: %v; not done: %s; not final: %s",
				r.m.deadline, counts, strings.Join(notDone, ", "), notFinal(r.coll, r.doneNames))
		}
		if err == nil && r.published < len(r.waves) && len(live)-done <= len(r.waves[r.published]) {
			r.publishWave()
		}
		if now.Sub(lastProgress) >= 10*time.Second {
			lastProgress = now
			t.Logf("t+%s: %v (kills %d, server restarts %d, failed polls %d)", r.since(), counts, r.faults.kills, r.faults.restarts, pollErrors)
		}
		if r.srv != nil && !r.noRestart && r.faults.restarts == 0 && !r.restartAt.IsZero() && now.After(r.restartAt) {
			began := time.Now()
			down, err := r.srv.restart()
			if err != nil {
				t.Fatal(err)
			}
			r.outage = span{begin: began, end: time.Now()}
			r.faults.restarts++
			r.faults.downtime += down
			t.Logf("t+%s: development server killed and started again on %s (down %s)", r.since(), r.srv.addr, down.Round(time.Millisecond))
		}
		if (r.faultEnd.IsZero() || now.Before(r.faultEnd)) && now.After(killAt) {
			var ready []*workerProc
			for _, p := range r.pool.current() {
				if p.isReady() && !p.hasExited() {
					ready = append(ready, p)
				}
			}
			if len(ready) > 0 {
				victim := ready[r.rng.IntN(len(ready))]
				victim.kill()
				r.faults.kills++
				r.pool.start(victim.slot)
			}
			killAt = nextKill()
		}
	}
}

// liveTask is what a poll reads of a task. It is read leniently, field by
// field, so that a document edited by hand into any shape is read too.
type liveTask struct {
	ID      bson.RawValue
	Key     string // the key field when it is a string (of at most 256 bytes), else ""
	Status  string // the status when it is a string; else how it is stored, or "(none)"
	Running int
	// Holders are the runs going on, with their lease, when holders is a
	// document whose entries are; HoldersOther says holders is there but is
	// something else (a value that is not a document, or an entry that is
	// not one with a date lease_until).
	Holders      map[string]liveHolder
	HoldersOther bool
	Unlogged     int    // runs whose history record is not written yet (entries of unlogged)
	InvalidField string // invalid.field, when a string
	FailedRuns   int
	RunAt        time.Time // zero unless run_at is a date
}

func (d liveTask) String() string {
	return fmt.Sprintf("{_id %s status %s running %d holders %v%s invalid.field %q}", d.ID, d.Status, d.Running, d.Holders,
		cond(d.HoldersOther, " (and others, unreadable)", ""), d.InvalidField)
}

type liveHolder struct {
	Run        string
	LeaseUntil time.Time
}

// liveProjection is what a poll reads of each task.
var liveProjection = bson.D{{Key: "key", Value: 1}, {Key: "status", Value: 1}, {Key: "running", Value: 1},
	{Key: "holders", Value: 1}, {Key: "unlogged", Value: 1}, {Key: "invalid", Value: 1},
	{Key: "failed_runs", Value: 1}, {Key: "run_at", Value: 1}}

func readLive(raw bson.Raw) liveTask {
	d := liveTask{ID: raw.Lookup("_id"), Status: "(none)"}
	if key, ok := raw.Lookup("key").StringValueOK(); ok && len(key) <= 256 {
		d.Key = key
	}
	switch v := raw.Lookup("status"); {
	case v.Type == 0:
	case len(v.Value) > 64: // edited by hand into something huge
		d.Status = fmt.Sprintf("(%s of %d bytes)", v.Type, len(v.Value))
	case v.Type == bson.TypeString:
		d.Status = v.StringValue()
	default:
		d.Status = v.String()
	}
	if n, ok := raw.Lookup("running").AsInt64OK(); ok {
		d.Running = int(n)
	}
	if n, ok := raw.Lookup("failed_runs").AsInt64OK(); ok {
		d.FailedRuns = int(n)
	}
	d.RunAt, _ = raw.Lookup("run_at").TimeOK()
	if v := raw.Lookup("holders"); v.Type != 0 {
		doc, ok := v.DocumentOK()
		d.HoldersOther = !ok
		elems, _ := doc.Elements()
		for _, e := range elems {
			h, ok := e.Value().DocumentOK()
			if !ok {
				d.HoldersOther = true
				continue
			}
			lease, ok := h.Lookup("lease_until").TimeOK()
			if !ok {
				d.HoldersOther = true
				continue
			}
			if d.Holders == nil {
				d.Holders = map[string]liveHolder{}
			}
			run, _ := h.Lookup("run").StringValueOK()
			d.Holders[e.Key()] = liveHolder{Run: run, LeaseUntil: lease}
		}
	}
	if doc, ok := raw.Lookup("unlogged").DocumentOK(); ok {
		elems, _ := doc.Elements()
		d.Unlogged = len(elems)
	}
	d.InvalidField, _ = raw.Lookup("invalid", "field").StringValueOK()
	return d
}

type liveTasks []liveTask

func (l liveTasks) counts() statuses {
	out := statuses{}
	for _, d := range l {
		out[d.Status]++
	}
	return out
}

// waitHistoryWritten waits until no task that filter selects marks a run
// whose history record is not written yet: the killed workers' marks are
// the maintenance lease holder's to finish.
func (r *run) waitHistoryWritten(filter bson.D) {
	deadline := time.Now().Add(historyDeadline)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n, err := r.coll.CountDocuments(ctx, append(bson.D{{Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}}, filter...))
		cancel()
		if err == nil && n == 0 {
			r.t.Logf("t+%s: every run's history record written", r.since())
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d tasks still mark runs whose history record is not written, %s after every task was final (%v)", n, historyDeadline, err)
		}
		<-tick.C
	}
}

// poll reads the status of every task in the collection, and archives the
// final ones when the mix says so.
func (r *run) poll() (liveTasks, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	// One batch: a getMore costs the development server another pass over its cursor.
	cur, err := r.coll.Find(ctx, bson.D{}, options.Find().SetProjection(liveProjection).SetBatchSize(pollBatch))
	if err != nil {
		return nil, err
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, err
	}
	live := make(liveTasks, len(raws))
	for i, raw := range raws {
		live[i] = readLive(raw)
	}
	if !r.m.archive {
		return live, nil
	}
	// A final task that nobody holds is never written again: no claim
	// matches its status, every run write is fenced on a holder, and a
	// sweep's repair is fenced on a rev it read while a lease was held.
	// So it is read in full, then deleted, by key.
	var kept liveTasks
	var done bson.A
	for _, d := range live {
		if isFinal(d.Status) && d.Running == 0 && len(d.Holders) == 0 && !d.HoldersOther && d.Unlogged == 0 && len(done) < archiveBatch {
			done = append(done, d.Key)
		} else {
			kept = append(kept, d)
		}
	}
	if len(done) == 0 {
		return live, nil
	}
	byKey := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: done}}}}
	cur, err = r.coll.Find(ctx, byKey)
	if err != nil {
		return nil, err
	}
	var docs []*storedTask
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	// Kept before the delete: a delete applied by a server that died before
	// it answered must not lose a task. One that failed leaves the tasks in
	// the collection, to be archived again (or read at the end).
	for _, d := range docs {
		r.archived[d.Key] = d
	}
	if _, err := r.coll.DeleteMany(ctx, byKey); err != nil {
		return nil, err
	}
	return kept, nil
}

func isFinal(status string) bool {
	switch mscheduler.Status(status) {
	case mscheduler.StatusSucceeded, mscheduler.StatusFailed, mscheduler.StatusFinished:
		return true
	}
	return false
}

// statuses counts tasks by status.
type statuses map[string]int

func (s statuses) total() int {
	n := 0
	for _, c := range s {
		n += c
	}
	return n
}

func (s statuses) final() int {
	return s[string(mscheduler.StatusSucceeded)] + s[string(mscheduler.StatusFailed)] + s[string(mscheduler.StatusFinished)]
}

func (s statuses) String() string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range s {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s[k]))
	}
	return strings.Join(parts, ", ")
}

// notFinal describes the tasks whose status is not one of done (nil: the
// final ones), for a timeout message.
func notFinal(coll *mongo.Collection, done []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if done == nil {
		done = []string{"succeeded", "failed", "finished"}
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: done}}}},
		options.Find().SetProjection(bson.D{{Key: "runs", Value: 0}, {Key: "params", Value: 0}}).SetLimit(20))
	if err != nil {
		return err.Error()
	}
	var docs []bson.M
	if err := cur.All(ctx, &docs); err != nil {
		return err.Error()
	}
	var out []string
	for _, d := range docs {
		out = append(out, fmt.Sprint(d))
	}
	return strings.Join(out, "\n")
}
