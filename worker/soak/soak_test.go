package soak

import (
	"context"
	"flag"
	"fmt"
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
)

// TestMain makes the test binary a worker process when the soak starts it
// as one.
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(runWorkerProcess())
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

func TestSoak(t *testing.T) {
	m := shortMix
	form := "short"
	if *longFlag {
		m, form = longMix, "long"
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak: %s form, %d tasks, seed %d (rerun with -soak.seed=%d), workers' SweepInterval %s", form, m.total(), seed, seed, *sweepFlag)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	began := time.Now()

	dir := *dirFlag
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}

	var srv *server
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		srv = startServer(t, dir)
		uri = srv.uri()
		t.Logf("development server at %s, data in %s", uri, srv.dir)
	} else {
		t.Log("MONGODB_URI is set: the soak uses that server and skips the server-restart fault")
	}

	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := client.Database(soakDatabase).Collection(fmt.Sprintf("soak_%d_%d", seed%1_000_000, time.Now().UnixNano()%1_000_000))
	if srv == nil && *dirFlag == "" {
		t.Cleanup(func() { _ = coll.Drop(context.Background()) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err = mscheduler.EnsureIndexes(ctx, coll)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	skews := make([]time.Duration, workers)
	skews[skewedSlot] = clockSkew
	pool := newWorkerPool(t, workerEnv{exe: exe, uri: uri, db: soakDatabase, coll: coll.Name(), dir: logDir, sweep: *sweepFlag}, skews)
	for slot := range workers {
		pool.start(slot)
	}
	for _, p := range pool.current() {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Fatalf("worker %s exited before it was ready: %v\n%s", p.id, p.err, p.stderrTail())
		case <-time.After(readyTimeout):
			t.Fatalf("worker %s not ready within %s\n%s", p.id, readyTimeout, p.stderrTail())
		}
	}

	tasks, specs := buildTasks(m, rng)
	producer, err := mscheduler.NewProducer[params](coll, &mscheduler.ProducerConfig{Defaults: mscheduler.TaskDefaults{Source: "soak"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, m: m, rng: rng, coll: coll, producer: producer, pool: pool, srv: srv, specs: specs,
		waves: slices.Collect(slices.Chunk(tasks, (len(tasks)+m.waves-1)/m.waves)), archived: map[string]*storedTask{}}
	r.loop()
	r.waitHistoryWritten()

	// Every task is final: stop the workers gracefully, all at once.
	var wg sync.WaitGroup
	for _, p := range pool.current() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.terminate(stopTimeout); err != nil {
				t.Errorf("worker %s after SIGTERM: %v\n%s", p.id, err, p.stderrTail())
			}
		}()
	}
	wg.Wait()
	for _, p := range pool.incarnations() {
		if p.unexpectedExit() {
			t.Errorf("worker %s exited on its own: %v\n%s", p.id, p.err, p.stderrTail())
		}
	}

	docs := readTasks(t, coll)
	for key, d := range r.archived {
		if docs[key] == nil { // else its delete failed: the stored one is as good
			docs[key] = d
		}
	}
	var logs []string
	incarnations := map[string]bool{}
	for _, p := range pool.incarnations() {
		logs = append(logs, p.logPath)
		incarnations[p.id] = true
	}
	runs, err := readHandlerLogs(logs)
	if err != nil {
		t.Fatalf("handler logs: %v", err)
	}
	v := &verifier{t: t, specs: specs, docs: docs, runs: runs, workers: incarnations, history: readHistory(t, coll)}
	sum := v.verify()
	sum.log(t, r.faults, time.Since(began), seed, len(pool.incarnations()), len(r.archived))
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
	nextKill := func() time.Time { return time.Now().Add(killEvery + time.Duration(r.rng.Int64N(int64(killJitter)))) }
	killAt := nextKill()
	lastProgress := time.Now()
	tick := time.NewTicker(pollEvery)
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
		live, err := r.poll()
		if err != nil {
			pollErrors++
		}
		counts := live.counts()
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
		if err == nil && r.published == len(r.waves) && counts.final() == len(live) && len(live)+gone == len(r.specs) {
			if pollErrors > 0 {
				t.Logf("%d polls of the collection failed (the server was down)", pollErrors)
			}
			t.Logf("t+%s: every task final: %v", r.since(), counts)
			return
		}
		now := time.Now()
		if now.After(deadline) {
			t.Fatalf("not every task final within %s of the first publish: %v; not final: %s", r.m.deadline, counts, notFinal(r.coll))
		}
		if err == nil && r.published < len(r.waves) && len(live)-counts.final() <= len(r.waves[r.published]) {
			r.publishWave()
		}
		if now.Sub(lastProgress) >= 10*time.Second {
			lastProgress = now
			t.Logf("t+%s: %v (kills %d, server restarts %d, failed polls %d)", r.since(), counts, r.faults.kills, r.faults.restarts, pollErrors)
		}
		if r.srv != nil && r.faults.restarts == 0 && !r.restartAt.IsZero() && now.After(r.restartAt) {
			down, err := r.srv.restart()
			if err != nil {
				t.Fatal(err)
			}
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

// liveTask is what a poll reads of a task.
type liveTask struct {
	Key      string         `bson:"key"`
	Status   string         `bson:"status"`
	Running  int            `bson:"running"`
	Holders  map[string]any `bson:"holders"`
	Unlogged map[string]any `bson:"unlogged"` // runs whose history record is not written yet
}

type liveTasks []liveTask

func (l liveTasks) counts() statuses {
	out := statuses{}
	for _, d := range l {
		out[d.Status]++
	}
	return out
}

// waitHistoryWritten waits until no task marks a run whose history record
// is not written yet: the killed workers' marks are the maintenance lease
// holder's to finish.
func (r *run) waitHistoryWritten() {
	deadline := time.Now().Add(historyDeadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n, err := r.coll.CountDocuments(ctx, bson.D{{Key: "unlogged", Value: bson.D{{Key: "$gt", Value: bson.D{}}}}})
		cancel()
		if err == nil && n == 0 {
			r.t.Logf("t+%s: every run's history record written", r.since())
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d tasks still mark runs whose history record is not written, %s after every task was final (%v)", n, historyDeadline, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// poll reads the status of every task in the collection, and archives the
// final ones when the mix says so.
func (r *run) poll() (liveTasks, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cur, err := r.coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{
		{Key: "key", Value: 1}, {Key: "status", Value: 1}, {Key: "running", Value: 1}, {Key: "holders", Value: 1}, {Key: "unlogged", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var live liveTasks
	if err := cur.All(ctx, &live); err != nil {
		return nil, err
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
		if isFinal(d.Status) && d.Running == 0 && len(d.Holders) == 0 && len(d.Unlogged) == 0 && len(done) < archiveBatch {
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

// notFinal describes the tasks that are not final, for a timeout message.
func notFinal(coll *mongo.Collection) string {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cur, err := coll.Find(ctx, bson.D{{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{"succeeded", "failed", "finished"}}}}},
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
