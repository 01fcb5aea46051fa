package soak

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/gateway"
	"github.com/mscheduler/mscheduler/worker/soak/histcheck"
)

// Environment of an executor process.
const (
	envGwExecutor = "MSCHEDULER_GWSOAK_EXECUTOR" // the incarnation's label
	envGwID       = "MSCHEDULER_GWSOAK_ID"       // the executor id, stable per slot
	envGwGroups   = "MSCHEDULER_GWSOAK_GROUPS"   // comma-separated
	envGwURL      = "MSCHEDULER_GWSOAK_URL"      // the collection's URL
	envGwLog      = "MSCHEDULER_GWSOAK_LOG"
)

// The gateway soak's settings.
const (
	gwWorkerID     = "gwsoak"
	gwTakeMax      = 4
	gwTakeWaitMS   = 2000
	gwWindow       = 25 * time.Second // due times are spread over it
	gwFaultTail    = 8 * time.Second  // kills go on this long past the window
	gwDeadline     = 3 * time.Minute  // every task final within it of the publish
	gwSlowLease    = 2500 * time.Millisecond
	gwQuickLease   = 5 * time.Second
	gwRenewEvery   = 500 * time.Millisecond
	gwFailedRuns   = 20 // failed runs allowed to the tasks expected to succeed
	gwFailRuns     = 2  // max_failed_runs of the always-failing tasks
	gwHTTPTimeout  = 30 * time.Second
	gwStopTimeout  = 10 * time.Second
	gwNotRenewed   = "did not renew the run within its lease"
	gwConcurrentOf = 2
	// gwTakeLatency bounds how long after an executor logs its first take
	// the gateway serves it, for the redelivery check: generous, for a
	// loaded machine.
	gwTakeLatency = time.Second
)

// gwSlot is an executor slot: an executor id and its groups.
type gwSlot struct {
	id     string
	groups []string
}

// gwSlots are the executor slots.
var gwSlots = []gwSlot{{"ex-1", nil}, {"ex-2", nil}, {"ex-3", []string{"b"}}}

// lrCalls are the calls of a logged run, none if it was not logged.
func lrCalls(lr *gwRunLog) []*gwCallLog {
	if lr == nil {
		return nil
	}
	return lr.calls
}

// gwMix is how many tasks of each kind the gateway soak publishes.
var gwMix = []struct {
	kind string
	n    int
}{{kindQuick, 54}, {kindSlow, 24}, {kindRetry, 16}, {kindFail, 8}, {kindConc, 10}, {kindDistinct, 8}}

// gwLease is the lease (worker_timeout_ms) of a task of kind.
func gwLease(kind string) time.Duration {
	if kind == kindSlow || kind == kindConc || kind == kindDistinct {
		return gwSlowLease
	}
	return gwQuickLease
}

// gwTasks builds the tasks to publish, as the gateway's JSON, and their
// specs.
func gwTasks(rng *rand.Rand, base time.Time) ([]map[string]any, map[string]spec) {
	var tasks []map[string]any
	specs := map[string]spec{}
	quickMS := func() int { return 10 + rng.IntN(41) }
	for _, m := range gwMix {
		for i := range m.n {
			key := fmt.Sprintf("%s-%04d", m.kind, i)
			s := spec{key: key, kind: m.kind, concurrency: 1, maxFailed: gwFailedRuns}
			dur := quickMS()
			task := map[string]any{"key": key, "description": "gateway soak " + m.kind,
				"ping_interval_ms": gwRenewEvery.Milliseconds(), "worker_timeout_ms": gwLease(m.kind).Milliseconds(),
				"run_at": base.Add(time.Duration(rng.Int64N(int64(gwWindow)))).UTC()}
			switch m.kind {
			case kindSlow:
				dur = 1000 + rng.IntN(2001)
			case kindRetry:
				task["max_retries"], task["retry_delay_ms"] = 1, 100
			case kindFail:
				s.maxFailed = gwFailRuns
				task["retry_delay_ms"] = 100
			case kindConc:
				// Concurrency 2 and 3: each executor is a worker, so a
				// task runs on up to that many executors at once.
				dur = 200 + rng.IntN(601)
				s.concurrency = gwConcurrentOf + i%2
				task["concurrency"] = s.concurrency
			case kindDistinct:
				dur = 200 + rng.IntN(601)
				s.concurrency, s.distinct = gwConcurrentOf, true
				task["concurrency"], task["distinct_workers"] = s.concurrency, true
			}
			task["max_failed_runs"] = s.maxFailed
			task["params"] = map[string]any{"kind": m.kind, "dur_ms": dur}
			tasks = append(tasks, task)
			specs[key] = s
		}
	}
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks, specs
}

// TestGatewaySoak is the crash soak of the HTTP gateway (worker/gateway):
// the runs are claimed by the gateway's pulling consumers, in this test
// process, and done by executor processes over HTTP, which the soak kills
// and starts again under the same executor id with a new session.
//
//	go test -race ./worker/soak -run TestGatewaySoak -v   # 120 tasks, about a minute
//
// The soak starts its development server (or uses MONGODB_URI, as TestSoak
// does), a gateway on it (gateway.New, served by httptest on 127.0.0.1) and
// three executor slots, ex-1 and ex-2 with no groups and ex-3 in group b:
// the gateway runs one consumer per set of groups, gwsoak and gwsoak-b, so
// that the runs of a concurrency-2 task can go on at once (a consumer holds
// one run of a task at most). It publishes 120 tasks through the gateway's
// API (quick, slow with a 2.5 s lease renewed every 500 ms, failing their
// first attempt, always failing without retry, concurrency 2), due over
// 25 s. Every 2-4 s (seeded, the seed logged) it SIGKILLs an executor,
// preferring one with runs going, and starts its slot again at once.
//
// Each executor process (the test binary run again with envGwExecutor set,
// through runGatewayExecutorProcess) takes up to 4 runs at a time (take,
// wait_ms 2000), runs each in a goroutine (a sleep of the task's dur_ms),
// renews every run it holds in one /renew every renew_every_ms, and ends
// each with /complete or /fail. It appends lines to a log of its
// incarnation, one write each:
//
//	hello LABEL SESSION UNIX_NANO              before its first take
//	redelivered KEY RUN LABEL DELIVERY UNIX_NANO  a run taken with delivery >= 2
//	start KEY RUN LABEL 0 UNIX_NANO            a run (attempt) begins
//	end KEY RUN LABEL OUTCOME UNIX_NANO        its work is done: succeeded, failed, cancelled (lost)
//	answer KEY RUN LABEL CODE/OUTCOME UNIX_NANO   the gateway's answer to its complete or fail
//	lost KEY RUN LABEL UNIX_NANO REASON        a renew or an end refused with 409
//	http PATH LABEL CODE UNIX_NANO MESSAGE     any other answer that is not a success
//
// LABEL is the executor id and incarnation (ex-2-i3). The end line is
// written before the outcome is sent, as a handler returns before its end
// is written.
//
// Once every task is final (polled every 500 ms, within 3 minutes of the
// publish) and its history written, it stops the executors and the gateway
// and checks:
//
//  1. every task is in its expected final state, with its options as
//     published (TestSoak's check 1);
//  2. succeeded counters and records equal the concurrency; always-failing
//     tasks have exactly max_failed_runs failed runs; a retried task
//     succeeded on its second attempt; a task that never fails has no failed
//     run but those of leases its executor did not renew;
//  4. no more runs of a task overlapped than its concurrency, and no
//     consumer held two runs of a task at once (package histcheck): a run
//     lasts from its first start line, on any incarnation, to its last end
//     line, and no longer than its record's finish (the gateway's hold ends
//     there; an executor that got a run back just before its old
//     incarnation's outcome was written may go on past it); a run whose last
//     call never logged an end (its executor was killed) lasts until its
//     record's finish, or is cut at its lease when recorded expired;
//  5. nothing is lost: no task holds a run, counters agree, every run the
//     executors logged is recorded by a gateway consumer, a run recorded
//     succeeded (failed) is one an executor logged so, or failed because its
//     lease was not renewed;
//  6. the run history holds every recorded run once (package histcheck);
//  7. redelivery: every run an incarnation was running when it was killed
//     came back to a later incarnation of its slot, unless that one's first
//     take came after the run's lease could have lapsed; and at least one run
//     came back and was completed by the returning executor;
//  8. executors: no lease lapsed under a live incarnation (the gateway's
//     "did not renew" errors in its log are matched to the incarnations), no
//     live executor was refused a run it held but for an expired run or one
//     whose outcome an earlier incarnation had sent, no other error answer,
//     no data race in the executors.
func TestGatewaySoak(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x6a7e5eed))
	began := time.Now()
	t.Logf("gateway soak: %d executor slots, seed %d (rerun with -soak.seed=%d)", len(gwSlots), seed, seed)

	dir := t.TempDir()
	if *dirFlag != "" {
		dir = filepath.Join(*dirFlag, "gateway")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		srv := startServer(t, dir)
		uri = srv.uri()
		t.Logf("development server at %s, data in %s", uri, srv.dir)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	coll := client.Database(soakDatabase).Collection(fmt.Sprintf("gwsoak_%d_%d", seed%1_000_000, time.Now().UnixNano()%1_000_000))
	if os.Getenv("MONGODB_URI") != "" && *dirFlag == "" {
		t.Cleanup(func() { _ = coll.Drop(context.Background()) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err = mscheduler.EnsureIndexes(ctx, coll)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	// The gateway, with its consumers' logs in a file: their "did not
	// renew" errors are checked against the kills.
	gwLogPath := filepath.Join(logDir, "gateway.log")
	gwLog, err := os.Create(gwLogPath)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(coll.Database(), &gateway.Config{
		Collections: []string{coll.Name()},
		WorkerID:    gwWorkerID,
		Logger:      slog.New(slog.NewJSONHandler(gwLog, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Consumer: mscheduler.ConsumerConfig{
			PollInterval:        100 * time.Millisecond,
			SweepInterval:       *sweepFlag,
			MaintenanceInterval: time.Second,
			RunsKept:            workerRunsKept, // every run record is checked
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(gw)
	gwStopped := false
	stopGateway := func() {
		if gwStopped {
			return
		}
		gwStopped = true
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := gw.Stop(ctx); err != nil {
			t.Errorf("stop the gateway: %v", err)
		}
		hs.Close()
		_ = gwLog.Close()
	}
	t.Cleanup(stopGateway)
	base := hs.URL + "/v1/collections/" + coll.Name()
	t.Logf("gateway at %s; logs in %s", base, logDir)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pool := &gwExecPool{t: t, exe: exe, url: base, dir: logDir, incs: make([]int, len(gwSlots)),
		procs: make([]*gwExecProc, len(gwSlots)), killedAt: map[string]time.Time{}}
	t.Cleanup(pool.killAll)
	for slot := range gwSlots {
		pool.start(slot)
	}

	// Publish through the gateway's API, due over the window from 1 s on.
	publishedAt := time.Now()
	tasks, specs := gwTasks(rng, publishedAt.Add(time.Second))
	code, out := gwCall(t, base+"/tasks", map[string]any{"tasks": tasks})
	if code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, out)
	}
	var published struct {
		Results []struct{ Key, Outcome string } `json:"results"`
	}
	if err := json.Unmarshal(out, &published); err != nil || len(published.Results) != len(tasks) {
		t.Fatalf("publish: %v, %d results for %d tasks: %s", err, len(published.Results), len(tasks), out)
	}
	for _, r := range published.Results {
		if r.Outcome != string(mscheduler.PublishInserted) {
			t.Fatalf("publish %s: %s, want inserted", r.Key, r.Outcome)
		}
	}
	t.Logf("published %d tasks through the gateway in %s, due over %s", len(tasks), time.Since(publishedAt).Round(time.Millisecond), gwWindow)

	kills := gwLoop(t, coll, pool, rng, specs, publishedAt)
	(&run{t: t, coll: coll}).waitHistoryWritten(bson.D{})

	// Every task is final: the executors go (their stdin closes), then the
	// gateway.
	pool.stopAll()
	stopGateway()

	docs := readTasks(t, coll)
	logs := pool.readLogs(t)
	lapses := readLapses(t, gwLogPath)
	v := &verifier{t: t, specs: specs, docs: docs, history: readHistory(t, coll)}
	g := &gwVerifier{v: v, logs: logs, pool: pool, lapses: lapses}
	sum := g.verify()
	sum.kills, sum.incarnations, sum.took, sum.seed = kills, len(pool.all), time.Since(began), seed
	sum.log(t)
}

// gwLoop waits, polling every 500 ms, for every task to be final, killing
// an executor every 2-4 s and starting its slot again at once. It returns
// the number of kills.
func gwLoop(t *testing.T, coll *mongo.Collection, pool *gwExecPool, rng *rand.Rand, specs map[string]spec, publishedAt time.Time) int {
	t.Helper()
	deadline := publishedAt.Add(gwDeadline)
	faultEnd := publishedAt.Add(time.Second + gwWindow + gwFaultTail)
	nextKill := func() time.Time { return time.Now().Add(killEvery + time.Duration(rng.Int64N(int64(killJitter)))) }
	killAt := nextKill()
	kills := 0
	lastProgress := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	since := func() time.Duration { return time.Since(publishedAt).Round(time.Second) }
	for {
		<-tick.C
		for _, p := range pool.current() {
			if p.unexpectedExit() {
				t.Errorf("executor %s exited on its own: %v\n%s", p.id, p.err, p.stderrTail())
				p.markExpected()
				pool.start(p.slot)
			}
		}
		counts, err := gwStatuses(coll)
		if err == nil && counts.final() == len(specs) && counts.total() == len(specs) {
			t.Logf("t+%s: every task final: %v (kills %d)", since(), counts, kills)
			return kills
		}
		now := time.Now()
		if now.After(deadline) {
			t.Fatalf("not every task final within %s of the publish: %v (%v); not final: %s", gwDeadline, counts, err, notFinal(coll, nil))
		}
		if now.Sub(lastProgress) >= 10*time.Second {
			lastProgress = now
			t.Logf("t+%s: %v (kills %d)", since(), counts, kills)
		}
		if now.Before(faultEnd) && now.After(killAt) {
			victim := pool.victim(rng)
			pool.kill(victim)
			kills++
			pool.start(victim.slot)
			killAt = nextKill()
		}
	}
}

// gwStatuses counts the tasks of the collection by status.
func gwStatuses(coll *mongo.Collection) (statuses, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "status", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		Status string `bson:"status"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := statuses{}
	for _, d := range docs {
		out[d.Status]++
	}
	return out, nil
}

// gwCall posts a JSON body from the test process.
func gwCall(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// gwExecProc is one executor incarnation; the soak worker's process type
// serves it (kill, stderr, exits).
type gwExecProc = workerProc

// gwExecPool is the executor slots.
type gwExecPool struct {
	t   *testing.T
	exe string
	url string
	dir string

	mu       sync.Mutex
	procs    []*gwExecProc // current incarnation per slot
	all      []*gwExecProc
	incs     []int
	killedAt map[string]time.Time // by label
}

func gwLabel(slot, inc int) string { return gwSlots[slot].id + "-i" + strconv.Itoa(inc) }

// start starts a new incarnation of slot, with a new session.
func (p *gwExecPool) start(slot int) *gwExecProc {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	label := gwLabel(slot, p.incs[slot])
	p.incs[slot]++
	proc := &gwExecProc{id: label, slot: slot,
		logPath: filepath.Join(p.dir, "executor-"+label+".log"), errPath: filepath.Join(p.dir, "executor-"+label+".stderr"),
		ready: make(chan struct{}), exited: make(chan struct{})}
	stderr, err := os.Create(proc.errPath)
	if err != nil {
		p.t.Fatal(err)
	}
	defer stderr.Close()                           // the child has its own copy
	proc.cmd = exec.Command(p.exe, "-test.run=^$") // TestMain runs the executor
	proc.cmd.Env = append(os.Environ(), envGwExecutor+"="+label, envGwID+"="+gwSlots[slot].id,
		envGwGroups+"="+strings.Join(gwSlots[slot].groups, ","), envGwURL+"="+p.url, envGwLog+"="+proc.logPath)
	proc.cmd.Stderr = stderr
	if proc.stdin, err = proc.cmd.StdinPipe(); err != nil {
		p.t.Fatal(err)
	}
	if err := proc.cmd.Start(); err != nil {
		p.t.Fatalf("start executor %s: %v", label, err)
	}
	go func() {
		proc.err = proc.cmd.Wait()
		close(proc.exited)
	}()
	p.procs[slot] = proc
	p.all = append(p.all, proc)
	return proc
}

func (p *gwExecPool) current() []*gwExecProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.procs)
}

// victim picks the executor to kill: one with runs going, if any.
func (p *gwExecPool) victim(rng *rand.Rand) *gwExecProc {
	procs := p.current()
	var busy []*gwExecProc
	for _, proc := range procs {
		if len(openRuns(proc.logPath)) > 0 {
			busy = append(busy, proc)
		}
	}
	if len(busy) > 0 {
		return busy[rng.IntN(len(busy))]
	}
	return procs[rng.IntN(len(procs))]
}

func (p *gwExecPool) kill(proc *gwExecProc) {
	proc.kill()
	p.mu.Lock()
	p.killedAt[proc.id] = time.Now()
	p.mu.Unlock()
}

// stopAll closes the current executors' stdin, which ends them, and waits.
func (p *gwExecPool) stopAll() {
	for _, proc := range p.current() {
		proc.markExpected()
		_ = proc.stdin.Close()
	}
	for _, proc := range p.current() {
		select {
		case <-proc.exited:
		case <-time.After(gwStopTimeout):
			p.t.Errorf("executor %s did not exit within %s of its stdin closing", proc.id, gwStopTimeout)
			proc.kill()
		}
	}
	for _, proc := range p.all {
		if proc.unexpectedExit() {
			p.t.Errorf("executor %s exited on its own: %v\n%s", proc.id, proc.err, proc.stderrTail())
		}
	}
}

func (p *gwExecPool) killAll() {
	for _, proc := range p.all {
		if !proc.hasExited() {
			proc.kill()
		}
	}
}

// openRuns are the runs whose start a log holds without an end.
func openRuns(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	open := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		switch f[0] {
		case "start":
			open[f[2]] = true
		case "end":
			delete(open, f[2])
		}
	}
	return slices.Sorted(maps.Keys(open))
}

// The executors' logs, as the checks read them.

// gwCallLog is one call of a run: its start and end in one incarnation.
type gwCallLog struct {
	label      string
	start, end int64 // UnixNano; end 0: never logged (killed)
	outcome    string
}

// gwRunLog is a run as the executors logged it, on every incarnation.
type gwRunLog struct {
	key, runID  string
	calls       []*gwCallLog     // by start
	redelivered map[string]int   // label → delivery
	answers     map[string][]int // label → HTTP status of its complete and fail
}

func (r *gwRunLog) ended() bool { return len(r.calls) > 0 && r.calls[len(r.calls)-1].end != 0 }

func (r *gwRunLog) logged(outcome string) bool {
	return slices.ContainsFunc(r.calls, func(c *gwCallLog) bool { return c.outcome == outcome })
}

// lastEnd is the latest end logged, 0 if none.
func (r *gwRunLog) lastEnd() int64 {
	var end int64
	for _, c := range r.calls {
		end = max(end, c.end)
	}
	return end
}

// gwLost is a run an executor was refused: a renew or an end answered 409.
type gwLost struct {
	key, runID, label string
	at                int64
	reason            string
}

// gwIncLog is what one incarnation logged besides its runs.
type gwIncLog struct {
	label string
	slot  int
	inc   int
	hello int64    // its first take; 0 if it never got there
	open  []string // runs it was running when it stopped
	lost  []gwLost
	http  []string // other answers that are not successes
}

type gwLogs struct {
	runs   map[string]*gwRunLog
	incs   []*gwIncLog // in start order
	format []string    // lines that break the format
	races  []string    // executors whose stderr reports a data race
}

func (p *gwExecPool) readLogs(t *testing.T) *gwLogs {
	t.Helper()
	logs := &gwLogs{runs: map[string]*gwRunLog{}}
	incOf := map[int]int{}
	for _, proc := range p.all {
		inc := &gwIncLog{label: proc.id, slot: proc.slot, inc: incOf[proc.slot]}
		incOf[proc.slot]++
		logs.incs = append(logs.incs, inc)
		if data, err := os.ReadFile(proc.errPath); err == nil && bytes.Contains(data, []byte("DATA RACE")) {
			logs.races = append(logs.races, proc.id+": "+proc.errPath)
		}
		data, err := os.ReadFile(proc.logPath)
		if errors.Is(err, os.ErrNotExist) {
			continue // killed before it opened its log
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			logs.format = append(logs.format, proc.logPath+": its last line is cut short: lines are written whole")
		}
		open := map[string]*gwCallLog{}
		n := 0
		for line := range strings.Lines(string(data)) {
			n++
			f := strings.Fields(line)
			bad := func(why string) {
				logs.format = append(logs.format, fmt.Sprintf("%s:%d: %s: %q", proc.logPath, n, why, line))
			}
			if len(f) < 4 {
				bad("too few fields")
				continue
			}
			if f[0] == "hello" {
				if at, err := strconv.ParseInt(f[3], 10, 64); err == nil && inc.hello == 0 {
					inc.hello = at
				}
				continue
			}
			if f[0] == "http" {
				inc.http = append(inc.http, strings.TrimSpace(line))
				continue
			}
			if len(f) < 6 {
				bad("too few fields")
				continue
			}
			key, runID, label := f[1], f[2], f[3]
			if label != proc.id {
				bad("another incarnation's label")
				continue
			}
			at, err := strconv.ParseInt(f[5], 10, 64)
			if f[0] == "lost" {
				at, err = strconv.ParseInt(f[4], 10, 64)
			}
			if err != nil {
				bad("bad time")
				continue
			}
			r := logs.runs[runID]
			if r == nil {
				r = &gwRunLog{key: key, runID: runID, redelivered: map[string]int{}, answers: map[string][]int{}}
				logs.runs[runID] = r
			}
			if r.key != key {
				bad("run id seen with another key")
				continue
			}
			switch f[0] {
			case "redelivered":
				d, _ := strconv.Atoi(f[4])
				r.redelivered[label] = max(r.redelivered[label], d)
			case "start":
				if open[runID] != nil {
					bad("a call started while the run's previous call in this incarnation had not ended")
				}
				c := &gwCallLog{label: label, start: at}
				open[runID] = c
				r.calls = append(r.calls, c)
			case "end":
				c := open[runID]
				if c == nil {
					bad("end without a start")
					continue
				}
				c.end, c.outcome = at, f[4]
				delete(open, runID)
			case "answer":
				code, _, _ := strings.Cut(f[4], "/")
				status, _ := strconv.Atoi(code)
				r.answers[label] = append(r.answers[label], status)
			case "lost":
				inc.lost = append(inc.lost, gwLost{key: key, runID: runID, label: label, at: at, reason: strings.Join(f[5:], " ")})
			default:
				bad("unknown line")
			}
		}
		inc.open = slices.Sorted(maps.Keys(open))
	}
	for _, r := range logs.runs {
		slices.SortStableFunc(r.calls, func(a, b *gwCallLog) int { return int(a.start - b.start) })
	}
	return logs
}

// gwLapse is a lease the gateway found not renewed: its log's "did not
// renew" error of a run.
type gwLapse struct {
	runID, executor string
	at              time.Time
}

// readLapses reads the gateway's log for the runs whose executor did not
// renew them.
func readLapses(t *testing.T, path string) []gwLapse {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []gwLapse
	for line := range strings.Lines(string(data)) {
		if !strings.Contains(line, gwNotRenewed) {
			continue
		}
		var rec struct {
			Time  time.Time `json:"time"`
			RunID string    `json:"run_id"`
			Error string    `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("gateway log: %v: %q", err, line)
			continue
		}
		executor := ""
		if _, rest, ok := strings.Cut(rec.Error, `executor "`); ok {
			executor, _, _ = strings.Cut(rest, `"`)
		}
		out = append(out, gwLapse{runID: rec.RunID, executor: executor, at: rec.Time})
	}
	return out
}

// The checks.

type gwVerifier struct {
	v      *verifier
	logs   *gwLogs
	pool   *gwExecPool
	lapses []gwLapse
}

type gwSummary struct {
	tasks, records               map[string]int
	runs, calls, noEnd           int
	cut                          int
	maxCutOverlap                time.Duration
	redelivered, redeliveredDone int
	maxDelivery                  int
	killedHolding, cameBack      int // runs going when their incarnation was killed; and those that came back
	lateBack                     int // of those, not back because the slot's next take came too late
	lapses, lapsesKilled, lost   int
	lostExplained                int
	kills, incarnations          int
	took                         time.Duration
	seed                         uint64
	violations                   map[string]int
	firstHelloAfterKillMax       time.Duration
	firstHelloAfterKillSum       time.Duration
	nHello                       int
}

func (g *gwVerifier) verify() gwSummary {
	v := g.v
	v.t.Helper()
	sum := gwSummary{tasks: map[string]int{}, records: map[string]int{}}
	v.records = map[string]storedRun{}
	for _, d := range v.docs {
		sum.tasks[d.Status]++
		for _, r := range d.Runs {
			sum.records[r.Outcome]++
			if _, dup := v.records[r.RunID]; dup {
				v.fail("5 nothing lost", "run %s of %s recorded twice", r.RunID, d.Key)
			}
			v.records[r.RunID] = r
		}
	}
	for _, r := range g.logs.runs {
		sum.runs++
		sum.calls += len(r.calls)
		if !r.ended() {
			sum.noEnd++
		}
	}
	v.checkFinalStates()
	g.checkRuns()
	rep := histcheck.Check(g.histInput())
	for _, f := range rep.Overlaps {
		v.fail("4 concurrency bound", "%s", f)
	}
	sum.cut, sum.maxCutOverlap = rep.Cut, rep.MaxCutOverlap
	g.checkNothingLost()
	for _, f := range rep.History {
		v.fail("6 history", "%s", f)
	}
	g.checkRedelivery(&sum)
	g.checkExecutors(&sum)
	sum.violations = v.failures
	return sum
}

// 2. Succeeded runs equal the concurrency; always-failing tasks failed
// max_failed_runs times; only leases not renewed fail the others' runs.
func (g *gwVerifier) checkRuns() {
	v := g.v
	const check = "2 runs"
	for _, key := range slices.Sorted(maps.Keys(v.specs)) {
		s, d := v.specs[key], v.docs[key]
		if d == nil {
			continue
		}
		succeeded, failed, expired := byOutcome(d.Runs)
		if s.kind == kindFail {
			if d.Succeeded != 0 || len(succeeded) != 0 || d.FailedRuns != s.maxFailed || len(failed)+len(expired) != s.maxFailed {
				v.fail(check, "always-failing task %s: succeeded %d (records %d), failed_runs %d, failed+expired records %d; want 0, 0, %d, %d (runs %s)",
					key, d.Succeeded, len(succeeded), d.FailedRuns, len(failed)+len(expired), s.maxFailed, s.maxFailed, outcomes(d.Runs))
			}
			continue
		}
		if d.Succeeded != s.concurrency || len(succeeded) != s.concurrency {
			v.fail(check, "task %s: succeeded counter %d, succeeded records %d; want both %d (runs %s)", key, d.Succeeded, len(succeeded), s.concurrency, outcomes(d.Runs))
		}
		if d.FailedRuns != len(failed)+len(expired) {
			v.fail(check, "task %s: failed_runs %d, but %d failed and expired records", key, d.FailedRuns, len(failed)+len(expired))
		}
		for _, r := range failed {
			if !strings.Contains(r.Error, gwNotRenewed) {
				v.fail(check, "task %s: run %s failed (%q), but its executor fails no run of it, and it is not a lease left unrenewed", key, r.RunID, r.Error)
			}
		}
		if s.kind == kindRetry {
			for _, r := range succeeded {
				if r.Attempts != 2 {
					v.fail(check, "retry task %s: run %s succeeded after %d attempts, want 2 (the first always fails)", key, r.RunID, r.Attempts)
				}
			}
		}
		if s.distinct {
			// Executors are workers: each success on another executor.
			var by []string
			for _, r := range succeeded {
				by = append(by, r.WorkerID)
			}
			slices.Sort(by)
			if len(slices.Compact(slices.Clone(by))) != len(by) || !slices.Equal(slices.Sorted(slices.Values(d.DoneBy)), by) {
				v.fail(check, "distinct-workers task %s: succeeded by %v, done_by %v; want as many executors as successes, and done_by to match", key, by, d.DoneBy)
			}
		}
	}
}

// histInput: a run lasts from its first start to its last end, on any
// incarnation, and no longer than its record's finish, the end of the
// gateway's hold; a run whose last call logged no end lasts until its
// finish, or is cut at its lease (expired) or release by the checker.
func (g *gwVerifier) histInput() histcheck.Input {
	v := g.v
	in := histcheck.Input{History: v.history, Concurrency: map[string]int{}, Slack: histcheck.DefaultSlack}
	for key, s := range v.specs {
		in.Concurrency[key] = s.concurrency
	}
	for _, id := range slices.Sorted(maps.Keys(g.logs.runs)) {
		r := g.logs.runs[id]
		if len(r.calls) == 0 {
			continue // taken, never started
		}
		rec, recorded := v.records[id]
		hr := histcheck.Run{Key: r.key, RunID: id, Worker: "(unrecorded)", Start: time.Unix(0, r.calls[0].start)}
		if r.ended() {
			hr.End = time.Unix(0, r.lastEnd())
		}
		if recorded {
			hr.Worker = rec.WorkerID
			if rec.Outcome != "expired" && rec.Outcome != "released" && (hr.End.IsZero() || hr.End.After(rec.Finished)) {
				hr.End = rec.Finished
			}
		}
		in.Runs = append(in.Runs, hr)
	}
	for _, key := range slices.Sorted(maps.Keys(v.docs)) {
		for _, r := range v.docs[key].Runs {
			in.Records = append(in.Records, histcheck.Record{Key: key, RunID: r.RunID, Worker: r.WorkerID,
				Outcome: r.Outcome, LeaseUntil: r.LeaseUntil, Finished: r.Finished})
		}
	}
	return in
}

// 5. Nothing lost or stuck.
func (g *gwVerifier) checkNothingLost() {
	v := g.v
	const check = "5 nothing lost"
	slotOf := map[string]int{} // an incarnation's label → its slot
	for _, proc := range g.pool.all {
		slotOf[proc.id] = proc.slot
	}
	for _, key := range slices.Sorted(maps.Keys(v.docs)) {
		d := v.docs[key]
		if len(d.Holders) != 0 || d.Running != 0 || d.NextExpiry != nil {
			v.fail(check, "task %s: holders %v, running %d, next_expiry %v after the gateway stopped", key, d.Holders, d.Running, d.NextExpiry)
		}
		if d.Free != d.Concurrency-d.Running-d.Succeeded {
			v.fail(check, "task %s: free %d, want concurrency %d - running %d - succeeded %d", key, d.Free, d.Concurrency, d.Running, d.Succeeded)
		}
		for _, r := range d.Runs {
			// Each executor is a worker: a run is held, and recorded, under
			// the id of the executor that ran it.
			lr := g.logs.runs[r.RunID]
			if !slices.ContainsFunc(gwSlots, func(sl gwSlot) bool { return sl.id == r.WorkerID }) {
				v.fail(check, "task %s: run %s recorded for %q, not one of the executors", key, r.RunID, r.WorkerID)
			}
			for _, c := range lrCalls(lr) {
				if slot, ok := slotOf[c.label]; ok && gwSlots[slot].id != r.WorkerID {
					v.fail(check, "task %s: run %s recorded for %q, run by executor %s (%s)", key, r.RunID, r.WorkerID, gwSlots[slot].id, c.label)
				}
			}
			notRenewed := strings.Contains(r.Error, gwNotRenewed)
			switch {
			case lr != nil && lr.key != key:
				v.fail(check, "run %s recorded on %s, logged on %s", r.RunID, key, lr.key)
			case r.Outcome == "succeeded" && (lr == nil || !lr.logged(logSucceeded)):
				v.fail(check, "task %s: run %s recorded succeeded, but no executor logged its success (%+v)", key, r.RunID, lr)
			case r.Outcome == "failed" && !notRenewed && (lr == nil || !lr.logged(logFailed)):
				v.fail(check, "task %s: run %s recorded failed (%q), but no executor logged its failure", key, r.RunID, r.Error)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(g.logs.runs)) {
		lr := g.logs.runs[id]
		rec, ok := v.records[id]
		switch {
		case !ok:
			v.fail(check, "run %s of %s (calls %d, ended %v) is in the executors' logs but recorded nowhere", id, lr.key, len(lr.calls), lr.ended())
		case !slices.ContainsFunc(lr.calls, func(c *gwCallLog) bool { return c.end != 0 }) && len(lr.calls) > 0 &&
			rec.Outcome != "expired" && rec.Outcome != "released" && !strings.Contains(rec.Error, gwNotRenewed):
			v.fail(check, "run %s of %s never logged an end on any executor, but is recorded %s (%q)", id, lr.key, rec.Outcome, rec.Error)
		}
	}
}

// 7. Runs going on a killed incarnation come back to its slot's next one;
// some come back and are completed there.
func (g *gwVerifier) checkRedelivery(sum *gwSummary) {
	v := g.v
	const check = "7 redelivery"
	bySlot := map[int][]*gwIncLog{}
	for _, inc := range g.logs.incs {
		bySlot[inc.slot] = append(bySlot[inc.slot], inc)
	}
	for _, inc := range g.logs.incs {
		killed, ok := g.pool.killedAt[inc.label]
		if !ok {
			continue
		}
		later := bySlot[inc.slot][inc.inc+1:]
		var next *gwIncLog // the first later incarnation that took
		for _, l := range later {
			if l.hello != 0 {
				next = l
				break
			}
		}
		if next != nil {
			after := time.Duration(next.hello - killed.UnixNano())
			sum.firstHelloAfterKillMax = max(sum.firstHelloAfterKillMax, after)
			sum.firstHelloAfterKillSum += after
			sum.nHello++
		}
		for _, id := range inc.open {
			r := g.logs.runs[id]
			sum.killedHolding++
			back := slices.ContainsFunc(later, func(l *gwIncLog) bool { return r.redelivered[l.label] >= 2 })
			if back {
				sum.cameBack++
				continue
			}
			lease := gwLease(v.specs[r.key].kind)
			// The run's lease ran from its last renewal, up to one renewal
			// interval before the kill; a take sent after it less the time
			// the take takes to reach the gateway (up to gwTakeLatency) may
			// find it lapsed.
			if next == nil || time.Duration(next.hello-killed.UnixNano()) > lease-gwRenewEvery-gwTakeLatency || v.records[id].Outcome == "expired" {
				sum.lateBack++
				continue
			}
			v.fail(check, "run %s of %s was going on %s when it was killed at %s, but %s, whose first take came %s later (lease %s), did not get it back (record: %+v)",
				id, r.key, inc.label, killed.Format("15:04:05.000"), next.label, time.Duration(next.hello-killed.UnixNano()).Round(time.Millisecond), lease, v.records[id])
		}
	}
	for _, r := range g.logs.runs {
		came := false
		for label, d := range r.redelivered {
			sum.maxDelivery = max(sum.maxDelivery, d)
			came = true
			if slices.Contains(r.answers[label], http.StatusOK) {
				sum.redeliveredDone++
				break
			}
		}
		if came {
			sum.redelivered++
		}
	}
	if sum.redeliveredDone == 0 {
		v.fail(check, "no run came back to a returning executor and was completed by it (runs back: %d, runs going at a kill: %d)", sum.redelivered, sum.killedHolding)
	}
}

// 8. No lease lapsed under a live executor, no live executor lost a run
// unexplained, no other error answers, no data race, logs well formed.
func (g *gwVerifier) checkExecutors(sum *gwSummary) {
	v := g.v
	const check = "8 executors"
	for _, f := range g.logs.format {
		v.fail(check, "%s", f)
	}
	for _, r := range g.logs.races {
		v.fail(check, "data race in executor %s", r)
	}
	for _, inc := range g.logs.incs {
		for _, h := range inc.http {
			v.fail(check, "executor %s got an error answer: %s", inc.label, h)
		}
	}
	// A lapse: the incarnation of that executor that last started the run
	// before it must have been killed before it.
	for _, l := range g.lapses {
		sum.lapses++
		r := g.logs.runs[l.runID]
		var last *gwCallLog
		if r != nil {
			for _, c := range r.calls {
				if strings.HasPrefix(c.label, l.executor+"-i") && c.start <= l.at.UnixNano() {
					last = c
				}
			}
		}
		if last == nil {
			// Taken by an incarnation killed before it logged the start, or
			// whose answer never reached it.
			sum.lapsesKilled++
			continue
		}
		if killed, ok := g.pool.killedAt[last.label]; ok && killed.Before(l.at) {
			sum.lapsesKilled++
			continue
		}
		v.fail(check, "run %s of %s: the gateway found its lease not renewed by %s at %s, but %s, which ran it, was alive (call %+v)",
			l.runID, r.key, l.executor, l.at.Format("15:04:05.000"), last.label, *last)
	}
	// A refused run: explained when its record expired (the consumer lost
	// the lease), or when an earlier incarnation sent the run's outcome.
	for _, inc := range g.logs.incs {
		for _, l := range inc.lost {
			sum.lost++
			rec := v.records[l.runID]
			r := g.logs.runs[l.runID]
			other := r != nil && slices.ContainsFunc(r.calls, func(c *gwCallLog) bool { return c.label != l.label && c.end != 0 && c.end < l.at })
			if rec.Outcome == "expired" || other {
				sum.lostExplained++
				continue
			}
			v.fail(check, "live executor %s was refused run %s of %s at %s: %s (record %+v)", l.label, l.runID, l.key,
				time.Unix(0, l.at).Format("15:04:05.000"), l.reason, rec)
		}
	}
}

func (s gwSummary) log(t *testing.T) {
	t.Helper()
	t.Logf("summary: tasks by final state: %v", statuses(s.tasks))
	t.Logf("summary: runs by outcome: %v", statuses(s.records))
	t.Logf("summary: runs in the executors' logs %d (calls %d), never ended on any executor %d, cut at their lease or release %d, largest lease-boundary overlap %s (allowed %s)",
		s.runs, s.calls, s.noEnd, s.cut, s.maxCutOverlap, histcheck.DefaultSlack)
	avg := time.Duration(0)
	if s.nHello > 0 {
		avg = s.firstHelloAfterKillSum / time.Duration(s.nHello)
	}
	t.Logf("summary: kills %d (%d incarnations); a slot's next first take came %s after a kill on average, %s at most",
		s.kills, s.incarnations, avg.Round(time.Millisecond), s.firstHelloAfterKillMax.Round(time.Millisecond))
	t.Logf("summary: runs going at a kill %d, back to the returning executor %d, not back because its first take came after the lease could lapse %d",
		s.killedHolding, s.cameBack, s.lateBack)
	t.Logf("summary: runs redelivered %d (highest delivery %d), redelivered and completed by the returning executor %d",
		s.redelivered, s.maxDelivery, s.redeliveredDone)
	t.Logf("summary: leases the gateway found not renewed %d (all of killed executors: %v), runs refused to executors %d (explained %d)",
		s.lapses, s.lapsesKilled == s.lapses, s.lost, s.lostExplained)
	t.Logf("summary: duration %s, seed %d, violations %d %v", s.took.Round(time.Second), s.seed, total(s.violations), s.violations)
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// The executor process.

// runGatewayExecutorProcess is the body of an executor process that
// TestGatewaySoak starts (TestMain runs it instead of the tests when
// envGwExecutor names the executor), and its exit status.
func runGatewayExecutorProcess(label string) int {
	// The parent holds our stdin open; when it closes (the soak is done,
	// or died), the executor goes, as the soak's workers do.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	if err := runGatewayExecutor(label); err != nil {
		fmt.Fprintln(os.Stderr, "gateway soak executor:", err)
		return 1
	}
	return 0
}

// gwRun is a run as a take hands it out.
type gwRun struct {
	RunID    string `json:"run_id"`
	Key      string `json:"key"`
	Attempt  int    `json:"attempt"`
	Delivery int    `json:"delivery"`
	Params   struct {
		Kind  string `json:"kind"`
		DurMS int    `json:"dur_ms"`
	} `json:"params"`
	LeaseMS      int64 `json:"lease_ms"`
	RenewEveryMS int64 `json:"renew_every_ms"`
}

type gwExecutor struct {
	label, id, session string
	groups             []string
	url                string
	client             *http.Client
	logFile            *os.File

	mu    sync.Mutex
	held  map[string]*gwHeld // by run id: runs being worked on, renewed
	freed chan struct{}      // buffered 1: a run ended
}

type gwHeld struct {
	run    gwRun
	cancel context.CancelFunc
}

func runGatewayExecutor(label string) error {
	logFile, err := os.OpenFile(os.Getenv(envGwLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	e := &gwExecutor{label: label, id: os.Getenv(envGwID), session: uuid.NewString(), url: os.Getenv(envGwURL),
		logFile: logFile, held: map[string]*gwHeld{}, freed: make(chan struct{}, 1),
		client: &http.Client{Timeout: gwHTTPTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * gwTakeMax}}}
	if g := os.Getenv(envGwGroups); g != "" {
		e.groups = strings.Split(g, ",")
	}
	go e.renewLoop()
	e.line("hello %s %s %d\n", label, e.session, time.Now().UnixNano())
	for {
		e.mu.Lock()
		n := gwTakeMax - len(e.held)
		e.mu.Unlock()
		if n <= 0 {
			select {
			case <-e.freed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		code, body, err := e.post("/take", map[string]any{"executor": e.id, "groups": e.groups, "session": e.session, "max": n, "wait_ms": gwTakeWaitMS})
		if err != nil || code != http.StatusOK {
			e.httpError("/take", code, body, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var out struct {
			Runs []gwRun `json:"runs"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return fmt.Errorf("take: %v: %s", err, body)
		}
		for _, r := range out.Runs {
			if r.Delivery >= 2 {
				e.line("redelivered %s %s %s %d %d\n", r.Key, r.RunID, e.label, r.Delivery, time.Now().UnixNano())
			}
			e.startRun(r)
		}
	}
}

// line appends one line to the log, with a single write, so that a kill
// leaves whole lines only.
func (e *gwExecutor) line(format string, args ...any) {
	if _, err := e.logFile.Write([]byte(fmt.Sprintf(format, args...))); err != nil {
		fmt.Fprintln(os.Stderr, "gateway soak executor: log:", err)
		os.Exit(4)
	}
}

func (e *gwExecutor) httpError(path string, code int, body []byte, err error) {
	msg := strings.Join(strings.Fields(string(body)), " ")
	if err != nil {
		msg = err.Error()
	}
	e.line("http %s %s %d %d %s\n", path, e.label, code, time.Now().UnixNano(), msg)
}

func (e *gwExecutor) post(path string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// startRun works on a run in a goroutine: its sleep, then its outcome.
func (e *gwExecutor) startRun(r gwRun) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &gwHeld{run: r, cancel: cancel}
	e.mu.Lock()
	if old := e.held[r.RunID]; old != nil {
		old.cancel() // not expected: a run is handed to one incarnation once per attempt
	}
	e.held[r.RunID] = h
	e.mu.Unlock()
	go func() {
		defer cancel()
		e.line("start %s %s %s 0 %d\n", r.Key, r.RunID, e.label, time.Now().UnixNano())
		select {
		case <-time.After(time.Duration(r.Params.DurMS) * time.Millisecond):
		case <-ctx.Done():
			e.line("end %s %s %s %s %d\n", r.Key, r.RunID, e.label, logCancelled, time.Now().UnixNano())
			e.drop(h)
			return
		}
		path, outcome := "/complete", logSucceeded
		body := map[string]any{"executor": e.id, "run_id": r.RunID, "attempt": r.Attempt}
		switch {
		case r.Params.Kind == kindFail:
			path, outcome = "/fail", logFailed
			body["error"], body["retry"] = "gateway soak: this task always fails", false
		case r.Params.Kind == kindRetry && r.Attempt == 1:
			path, outcome = "/fail", logFailed
			body["error"] = "gateway soak: first attempt fails"
		default:
			body["result"] = map[string]any{"by": e.label, "delivery": r.Delivery}
		}
		// The end is logged before the outcome is sent, as a handler
		// returns before its run end is written; no renewal after it.
		e.line("end %s %s %s %s %d\n", r.Key, r.RunID, e.label, outcome, time.Now().UnixNano())
		e.drop(h)
		code, resp, err := e.post(path, body)
		var answer struct {
			Outcome string `json:"outcome"`
			Error   string `json:"error"`
		}
		_ = json.Unmarshal(resp, &answer)
		e.line("answer %s %s %s %d/%s %d\n", r.Key, r.RunID, e.label, code, cmp.Or(answer.Outcome, "-"), time.Now().UnixNano())
		switch {
		case err == nil && code == http.StatusOK:
		case err == nil && code == http.StatusConflict:
			e.line("lost %s %s %s %d %s: %s\n", r.Key, r.RunID, e.label, time.Now().UnixNano(), path, oneLine(answer.Error))
		default:
			e.httpError(path, code, resp, err)
		}
	}()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// drop forgets a run that ended here: it is renewed no more.
func (e *gwExecutor) drop(h *gwHeld) {
	e.mu.Lock()
	if e.held[h.run.RunID] == h {
		delete(e.held, h.run.RunID)
	}
	e.mu.Unlock()
	select {
	case e.freed <- struct{}{}:
	default:
	}
}

// renewLoop renews every run held, in one request, every renew_every_ms
// (the shortest of the runs held).
func (e *gwExecutor) renewLoop() {
	last := time.Now()
	for range time.Tick(50 * time.Millisecond) {
		e.mu.Lock()
		every := time.Duration(0)
		ids := make([]string, 0, len(e.held))
		for id, h := range e.held {
			ids = append(ids, id)
			if d := time.Duration(h.run.RenewEveryMS) * time.Millisecond; d > 0 && (every == 0 || d < every) {
				every = d
			}
		}
		e.mu.Unlock()
		if every == 0 {
			every = gwRenewEvery
		}
		if len(ids) == 0 || time.Since(last) < every {
			continue
		}
		last = time.Now()
		code, body, err := e.post("/renew", map[string]any{"executor": e.id, "run_ids": ids})
		switch {
		case err == nil && code == http.StatusOK:
		case err == nil && code == http.StatusConflict:
			var out struct {
				Lost []struct {
					RunID  string `json:"run_id"`
					Reason string `json:"reason"`
				} `json:"lost"`
			}
			_ = json.Unmarshal(body, &out)
			for _, l := range out.Lost {
				e.mu.Lock()
				h := e.held[l.RunID]
				e.mu.Unlock()
				if h == nil {
					continue // it ended here meanwhile
				}
				e.line("lost %s %s %s %d renew: %s\n", h.run.Key, l.RunID, e.label, time.Now().UnixNano(), oneLine(l.Reason))
				h.cancel()
			}
		default:
			e.httpError("/renew", code, body, err)
		}
	}
}
