package mscheduler_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"pgregory.net/rapid"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// The state-machine test drives random sequences of everything that
// changes a task: publishes and every producer action, claims alone and in
// batches, run ends alone and in batches with every outcome, handlers run
// through the consumer's own execution (succeeding, failing, panicking,
// hanging past their Timeout), pings, worker deaths, sweeps, the periodic
// check, maintenance passes, and the passing of lease, retention and plan
// time (a fake clock, shared by every worker and the producer). After every step it reads the whole collection and
// checks every document against the invariants the owner of a task's
// state keeps (taskstate.Check) and against a reference model of plain
// tasks: their status, counters and the runs that hold them. At the end of
// each sequence, every run ended must be in the history, once, with its
// outcome.
//
// Each sequence runs on a collection of its own. The number of sequences
// is rapid's -rapid.checks, their mean length -rapid.steps (machineChecks
// and machineSteps by default, bounded for CI); -rapid.checks=2000
// -rapid.steps=100 runs longer. A failure is shrunk to
// a short sequence, printed with its seed, and kept under
// testdata/rapid/TestStateMachine, where every later run replays it first.

// machineChecks and machineSteps are how many sequences a plain go test
// runs, and their mean length.
const (
	machineChecks = 100
	machineSteps  = 50
)

// machineRetention is the retention of the sequences' tasks: short enough
// for the fake clock to pass it.
var machineRetention = mscheduler.Retention{Succeeded: time.Minute, Failed: 2 * time.Minute}

var machineKeys = []string{"k0", "k1", "k2"}

var machineWorkers = []string{"w1", "w2", "w3"}

func TestStateMachine(t *testing.T) {
	if !flagSet("rapid.checks") {
		_ = flag.Set("rapid.checks", fmt.Sprint(machineChecks))
	}
	if !flagSet("rapid.steps") {
		_ = flag.Set("rapid.steps", fmt.Sprint(machineSteps))
	}
	// The workers' batch claims and batched run ends reach the server
	// statement by statement, as MongoDB applies them.
	client := splitClient(t)
	var seq int
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		m := newMachine(t, rt, client, seq)
		defer m.close()
		rt.Repeat(m.actions())
		m.finish(rt)
	})
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// fakeClock is the wall and monotonic clock of every worker and the
// producer of a sequence: it moves only when the sequence says.
type fakeClock struct {
	mu      sync.Mutex
	base    time.Time
	elapsed time.Duration
}

func (c *fakeClock) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(c.elapsed)
}

func (c *fakeClock) mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elapsed += d
}

// mEnded is a run the sequence ended, or a sweep expired.
type mEnded struct {
	key     string
	outcome mscheduler.Outcome
	at      time.Time // when it ended
}

// expired says the run's history record may be gone: its retention ended.
func (e mEnded) expired(now time.Time) bool {
	keep := machineRetention.Failed
	if e.outcome == mscheduler.OutcomeSucceeded {
		keep = machineRetention.Succeeded
	}
	return !now.Before(e.at.Add(keep))
}

type machine struct {
	t       *testing.T
	ctx     context.Context
	coll    *mongo.Collection
	prod    *mscheduler.Producer[map[string]any]
	clock   *fakeClock
	workers map[string]*mscheduler.Worker
	tasks   map[string]*mTask
	ended   map[string]mEnded // by run id
	log     []string
}

// splitClient is a client whose updates reach the test server statement
// by statement, through a HoldProxy that splits them; the shared client
// when the server has several hosts.
func splitClient(t *testing.T) *mongo.Client {
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		return mschedulertest.Client()
	}
	_, client := heldClient(t, hosts[0], true)
	return client
}

func newMachine(t *testing.T, rt *rapid.T, client *mongo.Client, seq int) *machine {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("machine_%d_%s", seq, hex.EncodeToString(b[:]))
	coll := client.Database(mschedulertest.Database).Collection(name)
	ctx := context.Background()
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		rt.Fatalf("EnsureIndexes: %v", err)
	}
	clock := &fakeClock{base: time.Now()}
	prod, err := mscheduler.NewProducer[map[string]any](coll, &mscheduler.ProducerConfig{Clock: clock.wall, Monotonic: clock.mono, Retention: machineRetention})
	if err != nil {
		rt.Fatalf("NewProducer: %v", err)
	}
	m := &machine{t: t, ctx: ctx, coll: coll, prod: prod, clock: clock, workers: map[string]*mscheduler.Worker{},
		tasks: map[string]*mTask{}, ended: map[string]mEnded{}}
	var first *mscheduler.Worker
	for _, id := range machineWorkers {
		w, err := mscheduler.NewWorker(ctx, coll, id, clock.wall, clock.mono, machineRetention)
		if err != nil {
			rt.Fatalf("NewWorker: %v", err)
		}
		if first == nil {
			first = w
		}
		m.workers[id] = w
	}
	mscheduler.ShareClock(first, prod, slices.Collect(maps.Values(m.workers))...)
	return m
}

func (m *machine) close() {
	db := m.coll.Database()
	for _, suffix := range []string{"", ".meta", ".runs"} {
		_ = db.Collection(m.coll.Name() + suffix).Drop(context.Background())
	}
}

func (m *machine) now() time.Time { return m.workers[machineWorkers[0]].Now() }

func (m *machine) step(rt *rapid.T, format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// fail fails the sequence, printing its steps.
func (m *machine) fail(rt *rapid.T, format string, args ...any) {
	rt.Helper()
	rt.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.log, "\n  "))
}

func (m *machine) actions() map[string]func(*rapid.T) {
	// Claims and ends come more often than the rest: the states worth
	// reaching are those of tasks with runs going.
	return map[string]func(*rapid.T){
		"publish":     m.publish,
		"claim":       m.claim,
		"claim again": m.claim,
		"claimBatch":  m.claimBatch,
		"end":         m.end,
		"end again":   m.end,
		"execute":     m.execute,
		"endTogether": m.endTogether,
		"ping":        m.ping,
		"die":         m.die,
		"advance":     m.advance,
		"sweep":       m.sweep,
		"cancel":      m.cancel,
		"retry":       m.retry,
		"runNow":      m.runNow,
		"pause":       m.pause,
		"resume":      m.resume,
		"resize":      m.resize,
		"maxFailed":   m.maxFailed,
		"skipNext":    m.skipNext,
		"delete":      m.delete,
		"check":       m.check,
		"maintain":    m.maintain,
		"":            m.verify,
	}
}

func drawKey(rt *rapid.T) string { return rapid.SampledFrom(machineKeys).Draw(rt, "key") }

func drawWorker(rt *rapid.T) string { return rapid.SampledFrom(machineWorkers).Draw(rt, "worker") }

func (m *machine) publish(rt *rapid.T) {
	key := drawKey(rt)
	task := mscheduler.Task[map[string]any]{
		Key: key, Params: map[string]any{"n": 1},
		Concurrency:     rapid.IntRange(1, 3).Draw(rt, "concurrency"),
		MaxFailedRuns:   rapid.IntRange(1, 3).Draw(rt, "maxFailedRuns"),
		DistinctWorkers: rapid.Bool().Draw(rt, "distinct"),
		RetryDelay:      time.Millisecond,
		PingInterval:    time.Second,
		WorkerTimeout:   30 * time.Second,
		Timeout:         20 * time.Millisecond, // a handler that hangs fails soon
	}
	plan := rapid.IntRange(0, 4).Draw(rt, "plan") == 0
	if plan {
		p := mscheduler.Every(20, mscheduler.Second)
		p.Repeat = 3
		task.Plan = &p
	}
	reset := rapid.Bool().Draw(rt, "resetFinished")
	m.step(rt, "publish %s conc %d maxFailed %d distinct %v plan %v reset %v", key, task.Concurrency, task.MaxFailedRuns, task.DistinctWorkers, plan, reset)
	res, err := m.prod.Publish(m.ctx, task, &mscheduler.PublishOpts{ResetFinished: reset})
	if err != nil {
		m.fail(rt, "publish %s: %v", key, err)
	}
	mt, exists := m.tasks[key]
	want := mscheduler.PublishUnchanged
	switch {
	case !exists:
		want = mscheduler.PublishInserted
	case reset && mt.finishedForGood():
		want = mscheduler.PublishUpdated
	}
	if res.Outcome != want {
		m.fail(rt, "publish %s: outcome %s, the model says %s (task %+v)", key, res.Outcome, want, mt)
	}
	if want != mscheduler.PublishUnchanged {
		m.tasks[key] = publishedTask(task)
	}
}

// eligible are the plain tasks worker w may claim now, by the model.
func (m *machine) eligible(w string) []string {
	var out []string
	for key, t := range m.tasks {
		if !t.plan && t.claimableBy(w) {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// claimed takes a claim the library made into the model, after checking
// that the model allows it.
func (m *machine) claimed(rt *rapid.T, w string, r mscheduler.WorkerRun, eligible []string) {
	t, ok := m.tasks[r.Key]
	if !ok {
		m.fail(rt, "%s claimed %s, which the model does not have", w, r.Key)
	}
	if _, held := t.holders[w]; held {
		m.fail(rt, "%s claimed %s, which it already holds", w, r.Key)
	}
	if !t.plan && !slices.Contains(eligible, r.Key) {
		m.fail(rt, "%s claimed %s, which the model says it may not (task %+v, eligible %v)", w, r.Key, t, eligible)
	}
	t.claim(w, mHold{run: r.RunID, lease: r.Lease})
}

func (m *machine) claim(rt *rapid.T) {
	w := drawWorker(rt)
	m.clock.advance(17 * time.Millisecond) // past any retry delay (1 ms, doubled at most thrice)
	eligible := m.eligible(w)
	m.step(rt, "claim by %s (eligible %v)", w, eligible)
	r, err := m.workers[w].Claim(m.ctx)
	if err != nil {
		m.fail(rt, "claim by %s: %v", w, err)
	}
	if r == nil {
		if len(eligible) > 0 && !m.planClaimable() {
			m.fail(rt, "claim by %s found nothing, but the model has %v eligible", w, eligible)
		}
		return
	}
	m.step(rt, "  claimed %s run %s", r.Key, r.RunID)
	m.claimed(rt, w, *r, eligible)
}

// planClaimable says a task with a plan may be claimable: its plan gate
// may have given a claim back, which the model does not follow.
func (m *machine) planClaimable() bool {
	for _, t := range m.tasks {
		if t.plan && t.status.Claimable() {
			return true
		}
	}
	return false
}

func (m *machine) claimBatch(rt *rapid.T) {
	w := drawWorker(rt)
	k := rapid.IntRange(2, 4).Draw(rt, "k")
	m.clock.advance(17 * time.Millisecond)
	eligible := m.eligible(w)
	m.step(rt, "claim batch of %d by %s (eligible %v)", k, w, eligible)
	runs, err := m.workers[w].ClaimBatch(m.ctx, k)
	if err != nil {
		m.fail(rt, "batch claim by %s: %v", w, err)
	}
	for _, r := range runs {
		m.step(rt, "  claimed %s run %s", r.Key, r.RunID)
		m.claimed(rt, w, r, eligible)
	}
	if len(runs) == 0 && len(eligible) > 0 && !m.planClaimable() {
		m.fail(rt, "batch claim by %s found nothing, but the model has %v eligible", w, eligible)
	}
}

// drawRun draws a run some worker holds, by the worker's own view.
func (m *machine) drawRun(rt *rapid.T) (string, mscheduler.WorkerRun, bool) {
	type held struct {
		w string
		r mscheduler.WorkerRun
	}
	var all []held
	for _, w := range machineWorkers {
		runs := m.workers[w].Runs()
		sort.Slice(runs, func(i, j int) bool { return runs[i].Key < runs[j].Key }) // run ids are random
		for _, r := range runs {
			all = append(all, held{w, r})
		}
	}
	if len(all) == 0 {
		return "", mscheduler.WorkerRun{}, false
	}
	h := all[rapid.IntRange(0, len(all)-1).Draw(rt, "run")]
	return h.w, h.r, true
}

var machineOutcomes = []mscheduler.Outcome{mscheduler.OutcomeSucceeded, mscheduler.OutcomeFailed, mscheduler.OutcomeReleased,
	mscheduler.OutcomeCancelled, mscheduler.OutcomeRevoked}

// holds says the model has run as w's holder of key.
func (m *machine) holds(w string, key, run string) bool {
	t, ok := m.tasks[key]
	return ok && t.holders[w].run == run
}

func (m *machine) end(rt *rapid.T) {
	w, r, ok := m.drawRun(rt)
	if !ok {
		return
	}
	outcome := rapid.SampledFrom(machineOutcomes).Draw(rt, "outcome")
	m.step(rt, "end %s run %s of %s: %s", w, r.RunID, r.Key, outcome)
	held := m.holds(w, r.Key, r.RunID)
	err := m.workers[w].End(m.ctx, r.RunID, outcome)
	m.endResult(rt, w, r, outcome, held, err)
}

// execute runs a run's handler through the consumer's own execution
// (local retries, the task's Timeout, a panic recovered): it succeeds, or
// fails every attempt with an error, a panic or by hanging past its
// deadline, and the run ends succeeded or failed.
func (m *machine) execute(rt *rapid.T) {
	w, r, ok := m.drawRun(rt)
	if !ok {
		return
	}
	behaviour := rapid.SampledFrom([]string{"succeed", "error", "panic", "hang"}).Draw(rt, "behaviour")
	m.step(rt, "execute %s run %s of %s: %s", w, r.RunID, r.Key, behaviour)
	held := m.holds(w, r.Key, r.RunID)
	err := m.workers[w].Execute(m.ctx, r.RunID, behaviour)
	outcome := mscheduler.OutcomeFailed
	if behaviour == "succeed" {
		outcome = mscheduler.OutcomeSucceeded
	}
	m.endResult(rt, w, r, outcome, held, err)
}

func (m *machine) endResult(rt *rapid.T, w string, r mscheduler.WorkerRun, outcome mscheduler.Outcome, held bool, err error) {
	switch {
	case held && err != nil:
		m.fail(rt, "end of run %s of %s by %s: %v, but the model says it holds its slot", r.RunID, r.Key, w, err)
	case !held && !errors.Is(err, mscheduler.ErrLeaseLost):
		m.fail(rt, "end of run %s of %s by %s: %v, want ErrLeaseLost: the model says its slot was taken", r.RunID, r.Key, w, err)
	case held:
		m.tasks[r.Key].end(w, outcome)
		m.ended[r.RunID] = mEnded{key: r.Key, outcome: outcome, at: m.now()}
	}
}

func (m *machine) endTogether(rt *rapid.T) {
	w := drawWorker(rt)
	runs := m.workers[w].Runs()
	if len(runs) < 2 {
		return
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Key < runs[j].Key })
	ids := make([]string, len(runs))
	outcomes := make([]mscheduler.Outcome, len(runs))
	held := make([]bool, len(runs))
	for i, r := range runs {
		ids[i], held[i] = r.RunID, m.holds(w, r.Key, r.RunID)
		outcomes[i] = rapid.SampledFrom(machineOutcomes).Draw(rt, "outcome")
		m.step(rt, "end together %s run %s of %s: %s", w, r.RunID, r.Key, outcomes[i])
	}
	errs := m.workers[w].EndTogether(m.ctx, ids, outcomes)
	for i, r := range runs {
		m.endResult(rt, w, r, outcomes[i], held[i], errs[i])
	}
}

func (m *machine) ping(rt *rapid.T) {
	w, r, ok := m.drawRun(rt)
	if !ok {
		return
	}
	m.step(rt, "ping %s run %s of %s", w, r.RunID, r.Key)
	held := m.holds(w, r.Key, r.RunID)
	alive, err := m.workers[w].Ping(m.ctx, r.RunID)
	switch {
	case err != nil:
		m.fail(rt, "ping of run %s: %v", r.RunID, err)
	case alive != held:
		m.fail(rt, "ping of run %s of %s by %s says it holds its slot: %v; the model: %v", r.RunID, r.Key, w, alive, held)
	case alive:
		h := m.tasks[r.Key].holders[w]
		h.lease = m.now().Add(30 * time.Second)
		m.tasks[r.Key].holders[w] = h
	}
}

func (m *machine) die(rt *rapid.T) {
	w := drawWorker(rt)
	m.step(rt, "%s dies", w)
	m.workers[w].Die()
}

func (m *machine) advance(rt *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{1300 * time.Millisecond, 10700 * time.Millisecond, 31100 * time.Millisecond, 3*time.Minute + 300*time.Millisecond}).Draw(rt, "by")
	m.step(rt, "advance %s", d)
	m.clock.advance(d)
}

func (m *machine) sweep(rt *rapid.T) {
	w := drawWorker(rt)
	now := m.now()
	m.step(rt, "sweep by %s", w)
	if err := m.workers[w].Sweep(m.ctx); err != nil {
		m.fail(rt, "sweep: %v", err)
	}
	for _, key := range slices.Sorted(maps.Keys(m.tasks)) {
		t := m.tasks[key]
		for _, hw := range t.lapsed(now) {
			m.ended[t.holders[hw].run] = mEnded{key: key, outcome: mscheduler.OutcomeExpired, at: now}
			t.end(hw, mscheduler.OutcomeExpired)
		}
	}
}

// action runs a producer action and checks that it was refused exactly
// when the model says (with an *ActionError, or ErrNotFound for a task
// the model does not have).
func (m *machine) action(rt *rapid.T, verb, key string, allowed bool, do func() error) bool {
	err := do()
	_, exists := m.tasks[key]
	var ae *mscheduler.ActionError
	switch {
	case !exists && !errors.Is(err, mscheduler.ErrNotFound):
		m.fail(rt, "%s %s: %v, want ErrNotFound", verb, key, err)
	case exists && allowed && err != nil:
		m.fail(rt, "%s %s: %v; the model allows it (task %+v)", verb, key, err, m.tasks[key])
	case exists && !allowed && !errors.As(err, &ae) && !errors.Is(err, mscheduler.ErrInvalid):
		m.fail(rt, "%s %s: %v; the model refuses it (task %+v)", verb, key, err, m.tasks[key])
	}
	return exists && allowed
}

func (m *machine) task(key string) *mTask {
	if t, ok := m.tasks[key]; ok {
		return t
	}
	return &mTask{}
}

func (m *machine) cancel(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "cancel %s", key)
	t := m.task(key)
	if m.action(rt, "cancel", key, t.canCancel(), func() error { return m.prod.Cancel(m.ctx, key) }) {
		t.cancel()
	}
}

func (m *machine) retry(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "retry %s", key)
	t := m.task(key)
	if m.action(rt, "retry", key, t.canRetry(), func() error { return m.prod.Retry(m.ctx, key) }) {
		t.retry()
	}
}

func (m *machine) runNow(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "run now %s", key)
	t := m.task(key)
	m.action(rt, "run now", key, t.canRunNow(), func() error { return m.prod.RunNow(m.ctx, key) })
}

func (m *machine) pause(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "pause %s", key)
	if m.action(rt, "pause", key, true, func() error { return m.prod.Pause(m.ctx, key) }) {
		m.tasks[key].paused = true
	}
}

func (m *machine) resume(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "resume %s", key)
	t := m.task(key)
	if m.action(rt, "resume", key, t.canResume(), func() error { return m.prod.Resume(m.ctx, key) }) {
		t.paused = false
	}
}

func (m *machine) resize(rt *rapid.T) {
	key := drawKey(rt)
	conc := rapid.IntRange(1, 3).Draw(rt, "concurrency")
	m.step(rt, "resize %s to %d", key, conc)
	t := m.task(key)
	if m.action(rt, "resize", key, t.canResize(conc), func() error { return m.prod.Update(m.ctx, key, mscheduler.TaskUpdate{Concurrency: &conc}) }) {
		t.resize(conc)
	}
}

func (m *machine) maxFailed(rt *rapid.T) {
	key := drawKey(rt)
	n := rapid.IntRange(1, 3).Draw(rt, "maxFailedRuns")
	m.step(rt, "max failed runs of %s to %d", key, n)
	if m.action(rt, "update", key, true, func() error { return m.prod.Update(m.ctx, key, mscheduler.TaskUpdate{MaxFailedRuns: &n}) }) {
		m.tasks[key].maxFailed = n // runs going end by the new bound
	}
}

func (m *machine) skipNext(rt *rapid.T) {
	key := drawKey(rt)
	n := rapid.IntRange(0, 2).Draw(rt, "n")
	m.step(rt, "skip the next %d of %s", n, key)
	err := m.prod.SkipNext(m.ctx, key, n)
	t, exists := m.tasks[key]
	switch {
	case !exists && !errors.Is(err, mscheduler.ErrNotFound):
		m.fail(rt, "skip next of %s: %v, want ErrNotFound", key, err)
	case exists && t.plan && err != nil:
		m.fail(rt, "skip next of %s, a task with a plan: %v", key, err)
	case exists && !t.plan && !errors.Is(err, mscheduler.ErrInvalid):
		m.fail(rt, "skip next of %s, a task without a plan: %v, want an InvalidError", key, err)
	}
}

func (m *machine) delete(rt *rapid.T) {
	key := drawKey(rt)
	m.step(rt, "delete %s", key)
	t := m.task(key)
	if m.action(rt, "delete", key, t.canDelete(), func() error { return m.prod.Delete(m.ctx, key, nil) }) {
		delete(m.tasks, key)
	}
}

func (m *machine) check(rt *rapid.T) {
	w := drawWorker(rt)
	m.step(rt, "check by %s", w)
	before := m.snapshot(rt)
	if err := m.workers[w].Check(m.ctx); err != nil {
		m.fail(rt, "check: %v", err)
	}
	if after := m.snapshot(rt); !maps.EqualFunc(before, after, func(a, b bson.Raw) bool { return string(a) == string(b) }) {
		m.fail(rt, "the check changed documents the library wrote:\nbefore %v\nafter  %v", before, after)
	}
}

func (m *machine) maintain(rt *rapid.T) {
	w := drawWorker(rt)
	m.step(rt, "maintenance by %s", w)
	m.workers[w].Maintain(m.ctx)
	docs := m.snapshot(rt)
	for key, t := range m.tasks {
		if _, ok := docs[key]; !ok {
			if !t.finishedForGood() {
				m.fail(rt, "retention deleted %s, which is not finished for good (model %+v)", key, t)
			}
			delete(m.tasks, key)
		}
	}
}

// snapshot reads every task document, by key.
func (m *machine) snapshot(rt *rapid.T) map[string]bson.Raw {
	cur, err := m.coll.Find(m.ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "runs", Value: 0}}))
	if err != nil {
		m.fail(rt, "read the tasks: %v", err)
	}
	var raws []bson.Raw
	if err := cur.All(m.ctx, &raws); err != nil {
		m.fail(rt, "read the tasks: %v", err)
	}
	out := map[string]bson.Raw{}
	for _, raw := range raws {
		out[raw.Lookup("_id").StringValue()] = raw
	}
	return out
}

// verify runs after every step: every document keeps the owner's
// invariants, and every plain task is as the model says.
func (m *machine) verify(rt *rapid.T) {
	docs := m.snapshot(rt)
	retention := taskstate.Retention{Succeeded: machineRetention.Succeeded, Failed: machineRetention.Failed}
	for key, raw := range docs {
		if v := taskstate.Check(raw, retention); len(v) > 0 {
			m.fail(rt, "task %s breaks invariants %v\n%s", key, v, raw)
		}
		if _, ok := m.tasks[key]; !ok {
			m.fail(rt, "task %s is stored but not in the model", key)
		}
	}
	for key, t := range m.tasks {
		raw, ok := docs[key]
		if !ok {
			m.fail(rt, "task %s is in the model (%+v) but not stored", key, t)
		}
		m.compare(rt, key, t, raw)
	}
}

// compare checks a stored task against the model; a task with a plan is
// followed from the stored task, after its runs are checked.
func (m *machine) compare(rt *rapid.T, key string, t *mTask, raw bson.Raw) {
	var got struct {
		Status     mscheduler.Status `bson:"status"`
		Succeeded  int               `bson:"succeeded"`
		FailedRuns int               `bson:"failed_runs"`
		Paused     bool              `bson:"paused"`
		Holders    map[string]struct {
			Run string `bson:"run"`
		} `bson:"holders"`
	}
	if err := bson.Unmarshal(raw, &got); err != nil {
		m.fail(rt, "decode %s: %v", key, err)
	}
	holders := map[string]string{}
	for w, h := range got.Holders {
		holders[w] = h.Run
	}
	want := map[string]string{}
	for w, h := range t.holders {
		want[w] = h.run
	}
	if t.plan {
		// Runs the plan gate gave back leave the model's holders; none
		// may appear that no claim made.
		for w, run := range holders {
			if want[w] != run {
				m.fail(rt, "task %s is held by %s run %s, which no claim made (model holders %v)", key, w, run, want)
			}
		}
		for w := range want {
			if _, ok := holders[w]; !ok {
				delete(t.holders, w)
			}
		}
		t.status, t.succ, t.failed = got.Status, got.Succeeded, got.FailedRuns
		return
	}
	if got.Status != t.status || got.Succeeded != t.succ || got.FailedRuns != t.failed || got.Paused != t.paused || !maps.Equal(holders, want) {
		m.fail(rt, "task %s is stored as status %s, succeeded %d, failed_runs %d, paused %v, holders %v;\nthe model says %s, %d, %d, %v, %v\nsteps:\n%s",
			key, got.Status, got.Succeeded, got.FailedRuns, got.Paused, holders, t.status, t.succ, t.failed, t.paused, want, strings.Join(m.log, "\n"))
	}
}

// finish checks the history: once every history record left unwritten is
// written (a maintenance pass past the time a worker has to write them),
// every run ended is recorded once, with its outcome, and nothing else,
// but for records whose retention ended (retention may have deleted them).
func (m *machine) finish(rt *rapid.T) {
	m.clock.advance(time.Minute)
	m.workers[machineWorkers[0]].Maintain(m.ctx)
	cur, err := m.coll.Database().Collection(m.coll.Name()+".runs").Find(m.ctx, bson.D{})
	if err != nil {
		m.fail(rt, "read the history: %v", err)
	}
	var recs []struct {
		ID      string             `bson:"_id"`
		Key     string             `bson:"key"`
		Outcome mscheduler.Outcome `bson:"outcome"`
	}
	if err := cur.All(m.ctx, &recs); err != nil {
		m.fail(rt, "read the history: %v", err)
	}
	now, seen := m.now(), map[string]bool{}
	for _, r := range recs {
		want, ok := m.ended[r.ID]
		switch {
		case seen[r.ID]:
			m.fail(rt, "run %s is in the history twice", r.ID)
		case !ok || want.key != r.Key || want.outcome != r.Outcome:
			m.fail(rt, "the history holds run %s of %s, %s; the model: %+v (known %v)", r.ID, r.Key, r.Outcome, want, ok)
		}
		seen[r.ID] = true
	}
	for id, e := range m.ended {
		if !seen[id] && !e.expired(now) {
			m.fail(rt, "run %s of %s (%s, ended %s) is not in the history", id, e.key, e.outcome, e.at)
		}
	}
}
