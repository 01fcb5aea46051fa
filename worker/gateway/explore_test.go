package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

// TestExploreGatewayInterleavings is the interleaving explorer of
// mscheduler (its TestExploreInterleavings) for the gateway's own
// operations: a take, and a complete, fail or release of a taken run. The
// gateway reaches the server through a HoldProxy that splits updates
// statement by statement, as MongoDB applies them; the test's
// producer acts on the collection directly, as another process would. For
// every boundary of an operation (before each of its commands or
// statements, and after the last one before its reply) and every producer
// action, it stops the operation there, applies the action, lets the
// operation finish, and checks every task against the owner's invariants,
// no more runs held or done than the concurrency, and what the action
// promises: a cancel, pause or delete stands, no claim lands after one
// that landed before it, and a run taken after a params update carries
// the new params in the take's answer.
//
// A renew is not explored: it sends no command, the consumer's pings keep
// the lease (the library's explorer covers them).
//
// Each case runs a gateway of its own, with a worker id of its own
// (gx0001, gx0002, ...: none contains another), started before the case's
// tasks are published and stopped once they are checked; then they are
// deleted. The consumer's upkeep (sweeps, maintenance, clock measures) and
// the executors' heartbeats are put off by an hour, and its polls send
// nothing while no take waits. A case's commands are those on the task
// collection that name its worker id (every claim, claim read, plan gate
// and run end does, in its filter or its update), so that the upkeep of a
// consumer starting (a sweep, a maintenance turn, announces on .meta) and
// the history writes of stopped gateways, which name none, do not move a
// case's boundaries: they are counted among the case's commands (Nth of
// them), not among all the proxy sees. The read that ends a claim pass
// is left out (see commands).
//
// A take whose claim an action made miss would wait for work until its
// wait_ms: the test ends it once a claim pass after the action and the
// poll after that won nothing (see awaitOp).

// gxRetention keeps finished tasks, so that a case's checks see them.
var gxRetention = mscheduler.Retention{Succeeded: time.Hour, Failed: time.Hour}

// gxTakeWait is the wait_ms of the explored takes: long enough that a
// claim held while the actions apply is never given up on by its take. A
// take whose claim an action made miss does not wait it out: see awaitOp.
const gxTakeWait = 30 * time.Second

// gxOff is the interval of the gateway's background work: off for a case.
const gxOff = time.Hour

// gxPoll is how often a case's consumer looks for work while a take waits.
const gxPoll = 100 * time.Millisecond

// gxExplorer holds what every case shares: the collection, direct and
// through the proxy, the producer, and the HTTP server, which serves the
// gateway of the case at hand.
type gxExplorer struct {
	t     *testing.T
	ctx   context.Context
	coll  *mongo.Collection // direct: the test's producer and reads
	db    *mongo.Database   // through the proxy: the gateways'
	proxy *mschedulertest.HoldProxy
	prod  *mscheduler.Producer[map[string]any]
	gw    atomic.Pointer[gateway.Gateway]
	base  string // the collection's URL
	cases int
}

// gxCase is one case: its gateway's worker id, its tasks (actions apply
// to keys[0]), the runs its setup took, and the runs the operation took.
type gxCase struct {
	x       *gxExplorer
	wid     string
	keys    []string
	gw      *gateway.Gateway
	taken   []gxRun // by the setup
	claimed []gxRun // by the operation
	applied map[string]bool
	note    []string
	log     mschedulertest.Buffer
}

// gxRun is a run as a take's answer hands it out.
type gxRun struct {
	RunID   string         `json:"run_id"`
	Key     string         `json:"key"`
	Attempt int            `json:"attempt"`
	Params  map[string]any `json:"params"`
}

type gxOp struct {
	name  string
	tasks int
	task  func(key string, c *gxCase) mscheduler.Task[map[string]any]
	// warm has the gateway take a run of a task of its own before the
	// case's tasks are published (see takeWarm).
	warm bool
	// setup runs after the tasks are published: it takes the runs an end
	// needs, or has the consumer keep spare candidates.
	setup func(c *gxCase) error
	run   func(ctx context.Context, c *gxCase) error
	take  bool // the operation is a take: its claims are the case's
	skips bool // the take gets no run: the plan gate skips the occurrence
}

func gxTask(conc int) func(string, *gxCase) mscheduler.Task[map[string]any] {
	return func(key string, c *gxCase) mscheduler.Task[map[string]any] {
		return mscheduler.Task[map[string]any]{
			// Due a minute ago: due for the consumer too, whose server time
			// is measured apart from the producer's.
			Key: key, Params: map[string]any{"n": 1}, Concurrency: conc, MaxFailedRuns: 2, RunAt: time.Now().Add(-time.Minute),
			MaxRetries: mscheduler.NoRetries, RetryDelay: time.Millisecond,
			WorkerIDs: []string{c.wid, c.wid + "-2"}, PingInterval: time.Minute, WorkerTimeout: 10 * time.Minute,
		}
	}
}

func gxPlanTask(conc int) func(string, *gxCase) mscheduler.Task[map[string]any] {
	return func(key string, c *gxCase) mscheduler.Task[map[string]any] {
		t := gxTask(conc)(key, c)
		p := mscheduler.Every(1, mscheduler.Hour)
		t.Plan, t.RunAt = &p, time.Time{} // the plan starts when the server receives it
		return t
	}
}

// takeOne and takeTwo are explored takes.
func takeOne(ctx context.Context, c *gxCase) error { return c.takeInto(ctx, 1) }
func takeTwo(ctx context.Context, c *gxCase) error { return c.takeInto(ctx, 2) }

func (c *gxCase) takeInto(ctx context.Context, n int) error {
	runs, err := c.take(ctx, n, gxTakeWait)
	c.claimed = append(c.claimed, runs...)
	return err
}

// takeAll is the setup of an end: it takes a run of each of the case's
// tasks.
func (c *gxCase) takeAll() error {
	runs, err := c.take(c.x.ctx, len(c.keys), gxTakeWait)
	if err != nil {
		return err
	}
	if len(runs) != len(c.keys) {
		return fmt.Errorf("setup took %d runs of %d tasks", len(runs), len(c.keys))
	}
	c.taken = runs
	return nil
}

// takeWarm has the case's gateway claim and take a run of a task of its
// own before the case's tasks are published: its consumer has claimed
// before, and its next claim of one run is a findAndModify.
func (c *gxCase) takeWarm() error {
	if _, err := c.x.prod.Publish(c.x.ctx, gxTask(1)(c.wid+"-w", c), nil); err != nil {
		return err
	}
	runs, err := c.take(c.x.ctx, 1, gxTakeWait)
	if err == nil && len(runs) != 1 {
		err = fmt.Errorf("the take before the case took %d runs, want 1", len(runs))
	}
	return err
}

// spareOne has the case's gateway take a run of one of its tasks: the
// candidate read that found them all keeps the others as spares, and the
// next take claims from them without reading again. The case goes on with
// the others.
func (c *gxCase) spareOne() error {
	runs, err := c.take(c.x.ctx, 1, gxTakeWait)
	if err != nil {
		return err
	}
	if len(runs) != 1 {
		return fmt.Errorf("setup took %d runs, want 1", len(runs))
	}
	c.keys = slices.DeleteFunc(c.keys, func(k string) bool { return k == runs[0].Key })
	c.taken = runs
	return nil
}

func (c *gxCase) end(ctx context.Context, how string, body map[string]any) error {
	r := c.taken[0]
	body["executor"], body["run_id"], body["attempt"] = c.wid, r.RunID, r.Attempt
	code, out, err := c.x.post(ctx, "/"+how, body)
	if err != nil {
		return err
	}
	c.note = append(c.note, fmt.Sprintf("%s: %d %v", how, code, out))
	// 409: the run ended under its executor meanwhile (an action did it).
	if code != http.StatusOK && code != http.StatusConflict {
		return fmt.Errorf("%s answered %d %v", how, code, out)
	}
	return nil
}

var gxOps = []gxOp{
	{name: "take one, read and claim", tasks: 1, task: gxTask(1), take: true, run: takeOne},
	{name: "take one from spares", tasks: 2, task: gxTask(1), take: true, setup: (*gxCase).spareOne, run: takeOne},
	{name: "take one by findAndModify", tasks: 1, task: gxTask(1), take: true, warm: true, run: takeOne},
	{name: "take two", tasks: 2, task: gxTask(1), take: true, run: takeTwo},
	{name: "take two, read back", tasks: 2, task: gxTask(2), take: true, run: takeTwo},
	{name: "take planned", tasks: 1, task: gxPlanTask(2), take: true, run: takeOne},
	{name: "take planned, next skipped", tasks: 1, task: gxPlanTask(1), take: true, skips: true, run: takeOne,
		setup: func(c *gxCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) }},
	{name: "complete", tasks: 1, task: gxTask(1), setup: (*gxCase).takeAll, run: func(ctx context.Context, c *gxCase) error {
		return c.end(ctx, "complete", map[string]any{"result": map[string]any{"ok": true}})
	}},
	{name: "fail", tasks: 1, task: gxTask(1), setup: (*gxCase).takeAll, run: func(ctx context.Context, c *gxCase) error {
		return c.end(ctx, "fail", map[string]any{"error": "boom"})
	}},
	{name: "release", tasks: 1, task: gxTask(2), setup: (*gxCase).takeAll, run: func(ctx context.Context, c *gxCase) error {
		return c.end(ctx, "release", map[string]any{})
	}},
}

// gxAction is what the test does while the operation is held.
type gxAction struct {
	name  string
	apply func(c *gxCase) error
	// stops says that once the action landed, no claim of the task may
	// land after it.
	stops bool
	// check says what must hold once the operation finished; before says
	// the action landed before the operation sent its claim of keys[0].
	check func(c *gxCase, doc bson.Raw, before bool) error
}

// gxNotApplicable is an action refused for the task as it stands (a retry
// of a running task, a delete of one with a run going): nothing to check.
func gxNotApplicable(err error) bool {
	return err == nil || errors.Is(err, mscheduler.ErrNotApplicable) || errors.Is(err, mscheduler.ErrInvalid) || errors.Is(err, mscheduler.ErrNotFound)
}

// gxNewParams says a run of keys[0] taken after its params changed
// carries the new ones in the take's answer.
func gxNewParams(c *gxCase, _ bson.Raw, before bool) error {
	for _, r := range c.claimed {
		if r.Key == c.keys[0] && before && r.Params["n"] != float64(2) {
			return fmt.Errorf("run %s taken after the params changed carries params %v", r.RunID, r.Params)
		}
	}
	return nil
}

func gxStatusIs(want string) func(*gxCase, bson.Raw, bool) error {
	return func(_ *gxCase, doc bson.Raw, _ bool) error {
		if got, _ := doc.Lookup("status").StringValueOK(); got != want {
			return fmt.Errorf("status %q after the action, want %q", got, want)
		}
		return nil
	}
}

var gxActions = []gxAction{
	{name: "cancel", stops: true, apply: func(c *gxCase) error { return c.x.prod.Cancel(c.x.ctx, c.keys[0]) }, check: gxStatusIs("cancelled")},
	{name: "pause", stops: true, apply: func(c *gxCase) error { return c.x.prod.Pause(c.x.ctx, c.keys[0]) },
		check: func(_ *gxCase, doc bson.Raw, _ bool) error {
			if p, _ := doc.Lookup("paused").BooleanOK(); !p {
				return errors.New("the pause did not stand")
			}
			return nil
		}},
	{name: "pause and resume", apply: func(c *gxCase) error {
		if err := c.x.prod.Pause(c.x.ctx, c.keys[0]); err != nil {
			return err
		}
		return c.x.prod.Resume(c.x.ctx, c.keys[0])
	}},
	{name: "skip next", apply: func(c *gxCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) }},
	{name: "retry", apply: func(c *gxCase) error { return c.x.prod.Retry(c.x.ctx, c.keys[0]) }},
	{name: "run now", apply: func(c *gxCase) error { return c.x.prod.RunNow(c.x.ctx, c.keys[0]) }},
	{name: "delete", stops: true, apply: func(c *gxCase) error { return c.x.prod.Delete(c.x.ctx, c.keys[0], nil) }},
	{name: "update params", apply: func(c *gxCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, mscheduler.Task[map[string]any]{Key: c.keys[0], Params: map[string]any{"n": 2}}, &mscheduler.PublishOpts{UpdateParams: true})
		return err
	}, check: gxNewParams},
	{name: "edit params by hand", apply: func(c *gxCase) error {
		// As in mongosh: nothing else of the task moves.
		_, err := c.x.coll.UpdateOne(c.x.ctx, bson.D{{Key: "_id", Value: c.keys[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "params.n", Value: 2}}}})
		return err
	}, check: gxNewParams},
	{name: "publish reset", apply: func(c *gxCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, gxTask(1)(c.keys[0], c), &mscheduler.PublishOpts{ResetFinished: true})
		return err
	}},
	{name: "move run_at", apply: func(c *gxCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, mscheduler.Task[map[string]any]{Key: c.keys[0], RunAt: time.Now().Add(time.Hour)}, &mscheduler.PublishOpts{MoveRunAt: true})
		if errors.Is(err, mscheduler.ErrInvalid) {
			return nil // a plan sets its own run_at
		}
		return err
	}},
	{name: "raise concurrency", apply: func(c *gxCase) error {
		conc := 3
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{Concurrency: &conc})
	}},
	{name: "exclude the worker", stops: true, apply: func(c *gxCase) error {
		ids := []string{c.wid + "-2"}
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{WorkerIDs: &ids})
	}},
}

// gxBoundary is where a case stops the operation: before its n-th command
// (from 1), or after its last one, before the reply.
type gxBoundary struct {
	n  int
	at mschedulertest.HoldPoint
}

func (b gxBoundary) String() string {
	if b.at == mschedulertest.BeforeReply {
		return fmt.Sprintf("after command %d", b.n)
	}
	return fmt.Sprintf("before command %d", b.n)
}

func TestExploreGatewayInterleavings(t *testing.T) {
	x := newGxExplorer(t)
	total := 0
	for _, op := range gxOps {
		t.Run(op.name, func(t *testing.T) {
			x.t = t
			from := x.cases
			cmds := x.record(op)
			var bounds []gxBoundary
			for n := 1; n <= len(cmds); n++ {
				bounds = append(bounds, gxBoundary{n: n, at: mschedulertest.BeforeSend})
			}
			bounds = append(bounds, gxBoundary{n: len(cmds), at: mschedulertest.BeforeReply})
			for _, b := range bounds {
				for _, a := range gxActions {
					x.explore(op, b, a)
				}
			}
			n := x.cases - from - 1 // the recording is not a case
			t.Logf("%s: %d commands (%s), %d cases", op.name, len(cmds), strings.Join(cmds, ", "), n)
			total += n
		})
	}
	t.Logf("explored %d (operation, boundary, action) cases", total)
	fmt.Printf("gateway interleaving explorer: %d (operation, boundary, action) cases\n", total)
}

func newGxExplorer(t *testing.T) *gxExplorer {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the proxy stands in front of a single-host server", len(hosts))
	}
	proxy, err := mschedulertest.StartHoldProxy(hosts[0], mschedulertest.HoldOptions{Split: true})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(proxy.URI()))
	if err != nil {
		t.Fatal(err)
	}
	prod, err := mscheduler.NewProducer[map[string]any](coll, &mscheduler.ProducerConfig{Retention: gxRetention})
	if err != nil {
		t.Fatal(err)
	}
	x := &gxExplorer{t: t, ctx: ctx, coll: coll, db: client.Database(coll.Database().Name()), proxy: proxy, prod: prod}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { x.gw.Load().ServeHTTP(w, r) }))
	x.base = srv.URL + "/v1/collections/" + coll.Name()
	// Cleanups run last in first: the server (its requests done), the
	// client, then the proxy, which lets anything still held go.
	t.Cleanup(proxy.Close)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	t.Cleanup(srv.Close)
	return x
}

// post sends a JSON request to the case's gateway and decodes its JSON
// answer. It may run beside the test's goroutine: it reports, never fails.
func (x *gxExplorer) post(ctx context.Context, path string, body any) (int, map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", x.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("POST %s: %d, body not JSON: %s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out, nil
}

// take takes up to n runs, waiting up to wait for one. A take that the
// test ended (ctx cancelled) took nothing.
func (c *gxCase) take(ctx context.Context, n int, wait time.Duration) ([]gxRun, error) {
	code, out, err := c.x.post(ctx, "/take", map[string]any{"executor": c.wid, "max": n, "wait_ms": wait.Milliseconds()})
	if err != nil && ctx.Err() != nil {
		c.note = append(c.note, "the take was ended: its claim won nothing")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("take answered %d %v", code, out)
	}
	raw, err := json.Marshal(out["runs"])
	if err != nil {
		return nil, err
	}
	var runs []gxRun
	if err := json.Unmarshal(raw, &runs); err != nil {
		return nil, err
	}
	c.note = append(c.note, fmt.Sprintf("took %v", runs))
	return runs, nil
}

// newCase starts the case's gateway, publishes its tasks and runs the
// operation's setup.
func (x *gxExplorer) newCase(op gxOp) *gxCase {
	x.cases++
	c := &gxCase{x: x, wid: fmt.Sprintf("gx%04d", x.cases), applied: map[string]bool{}}
	cfg := &gateway.Config{
		Collections: []string{x.coll.Name()},
		WorkerID:    c.wid, HeartbeatInterval: gxOff, UntakenHold: gxOff,
		Logger: slog.New(slog.NewTextHandler(&c.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Consumer: mscheduler.ConsumerConfig{
			// Polls send nothing while no take waits (the demand is met).
			Discovery: mscheduler.DiscoveryPoll, PollInterval: gxPoll, SweepInterval: gxOff, MaintenanceInterval: gxOff,
			CheckInterval: gxOff, ClockSyncInterval: gxOff, Retention: gxRetention,
		},
	}
	gw, err := gateway.New(x.db, cfg)
	if err != nil {
		x.t.Fatal(err)
	}
	c.gw = gw
	x.gw.Store(gw)
	if !gateway.PoolServed(x.ctx, gw, x.coll.Name(), c.wid) {
		x.t.Fatalf("%s: the gateway's pool did not start", op.name)
	}
	if op.warm {
		if err := c.takeWarm(); err != nil {
			x.t.Fatalf("%s: warm-up: %v", op.name, err)
		}
	}
	for i := range op.tasks {
		key := fmt.Sprintf("%s-%c", c.wid, 'a'+i)
		c.keys = append(c.keys, key)
		if _, err := x.prod.Publish(x.ctx, op.task(key, c), nil); err != nil {
			x.t.Fatal(err)
		}
	}
	if op.setup != nil {
		if err := op.setup(c); err != nil {
			x.t.Fatalf("%s: setup: %v\n%s", op.name, err, c.log.String())
		}
	}
	return c
}

// endCase stops the case's gateway: the runs it holds are released.
func (x *gxExplorer) endCase(c *gxCase) {
	ctx, cancel := context.WithTimeout(x.ctx, time.Minute)
	defer cancel()
	if err := c.gw.Stop(ctx); err != nil {
		x.t.Fatalf("stopping the gateway of %s: %v", c.wid, err)
	}
	// Checked, the case's tasks go: each claim's candidate read would
	// otherwise pass over every case's before it.
	if _, err := x.coll.DeleteMany(ctx, gxCaseFilter(c.wid)); err != nil {
		x.t.Fatal(err)
	}
}

// commands accepts the case's commands: on the task collection, naming
// its worker id (its keys begin with it), but for the read that ends a
// claim pass (see nextDueRead). That read changes nothing and goes after
// the runs it claimed are handed out, so it comes before or after a
// take's answer, and after a setup's take, into the operation's time: as
// a boundary it would come and go.
func (c *gxCase) commands() func(mschedulertest.Command) bool {
	mine, nextDue := c.named(), c.nextDueRead()
	return func(cmd mschedulertest.Command) bool { return mine(cmd) && !nextDue(cmd) }
}

// named accepts the commands on the task collection that name the case's
// worker id.
func (c *gxCase) named() func(mschedulertest.Command) bool {
	wid := []byte(c.wid)
	return func(cmd mschedulertest.Command) bool {
		if cmd.Monitoring() || cmd.Collection != c.x.coll.Name() {
			return false
		}
		return bytes.Contains(cmd.Body, wid) || slices.ContainsFunc(cmd.Writes, func(w bson.Raw) bool { return bytes.Contains(w, wid) })
	}
}

// nextDueRead accepts the read that ends a claim pass that found less
// than it wanted: the case's consumer looks for its next task not due yet.
func (c *gxCase) nextDueRead() func(mschedulertest.Command) bool {
	mine := c.named()
	return func(cmd mschedulertest.Command) bool {
		_, err := cmd.Body.LookupErr("filter", "run_at", "$gt")
		return cmd.Name == "find" && err == nil && mine(cmd)
	}
}

// record runs the operation once, unheld, and returns the commands it
// sent, as the boundaries to explore.
func (x *gxExplorer) record(op gxOp) []string {
	c := x.newCase(op)
	defer x.endCase(c)
	from := x.proxy.Seq()
	var passEnd *mschedulertest.Hold
	if op.take {
		passEnd = x.proxy.Hold(mschedulertest.BeforeSend, c.nextDueRead())
	}
	done, endOp := x.start(op, c)
	defer endOp()
	if err := x.awaitOp(c, done, passEnd, endOp); err != nil {
		x.t.Fatalf("%s: %v", op.name, err)
	}
	var out []string
	for _, cmd := range x.proxy.Since(from) {
		if c.commands()(cmd) {
			out = append(out, c.describe(cmd))
		}
	}
	if len(out) == 0 {
		x.t.Fatalf("%s sent no command", op.name)
	}
	if want := len(c.keys); op.take && !op.skips && len(c.claimed) != want {
		x.t.Fatalf("%s took %d runs of %d tasks: %v", op.name, len(c.claimed), want, c.note)
	}
	x.checkCase(op, c, op.name, nil, false)
	return out
}

// start runs the operation beside the test; endOp ends its request.
func (x *gxExplorer) start(op gxOp, c *gxCase) (done <-chan error, endOp func()) {
	ctx, cancel := context.WithCancel(x.ctx)
	ch := make(chan error, 1)
	go func() { ch <- op.run(ctx, c) }()
	return ch, cancel
}

// describe names a command as the log lists it: its name, what a read
// is for, and the statement of a split write.
func (c *gxCase) describe(cmd mschedulertest.Command) string {
	out := cmd.Name
	if cmd.Name == "find" {
		switch {
		case c.nextDueRead()(cmd):
			out += " next due"
		case cmd.Body.Lookup("filter", "holders."+c.wid+".run").Type != 0:
			out += " claims won"
		default:
			out += " candidates"
		}
	}
	if cmd.Statements > 0 {
		out += fmt.Sprintf(" %d/%d", cmd.Statement+1, cmd.Statements)
	}
	return out
}

// explore runs one case: the operation stopped at b while the action
// applies.
func (x *gxExplorer) explore(op gxOp, b gxBoundary, a gxAction) {
	c := x.newCase(op)
	defer x.endCase(c)
	where := fmt.Sprintf("%s, %s, %s", op.name, b, a.name)
	hold := x.proxy.Hold(b.at, mschedulertest.Nth(b.n, c.commands()))
	from := x.proxy.Seq()
	done, endOp := x.start(op, c)
	defer endOp()
	var heldCmd mschedulertest.Command
	select {
	case err := <-done:
		// The operation took another path this time (it sent fewer
		// commands): nothing to hold.
		hold.Release()
		if err != nil {
			x.t.Fatalf("%s: %v", where, err)
		}
		x.checkCase(op, c, where, nil, false)
		return
	case <-hold.Reached():
		heldCmd, _ = hold.Wait(x.ctx)
	}
	err := a.apply(c)
	if !gxNotApplicable(err) {
		hold.Release()
		<-done
		x.t.Fatalf("%s: action %s: %v", where, a.name, err)
	}
	c.applied[a.name] = err == nil
	before := !gxClaimSent(x.proxy.Since(from), heldCmd, c.claimsOf(c.keys[0]), b.at == mschedulertest.BeforeReply)
	var passEnd *mschedulertest.Hold
	if op.take {
		passEnd = x.proxy.Hold(mschedulertest.BeforeSend, c.nextDueRead())
	}
	hold.Release()
	if err := x.awaitOp(c, done, passEnd, endOp); err != nil {
		x.t.Fatalf("%s: the operation: %v\n%v", where, err, c.note)
	}
	x.checkCase(op, c, where, []gxAction{a}, before)
}

// awaitOp waits for the operation to end. A take whose claim an action
// made miss would wait out its wait_ms; the test ends it once a claim pass
// after the action ended (passEnd: its claim writes were answered) with no
// run of the case's tasks won, and the next pass, a poll, found none
// either, as its executor giving up would.
func (x *gxExplorer) awaitOp(c *gxCase, done <-chan error, passEnd *mschedulertest.Hold, endOp func()) error {
	for empty := 0; passEnd != nil; {
		select {
		case err := <-done:
			passEnd.Release()
			return err
		case <-passEnd.Reached():
		}
		held, err := x.coll.CountDocuments(x.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: c.keys}}}, {Key: "holders." + c.wid, Value: bson.D{{Key: "$exists", Value: true}}}})
		if err != nil {
			x.t.Fatal(err)
		}
		next := passEnd
		if held > 0 {
			next = nil // the run is on its way to the take
		} else if empty++; empty == 2 {
			endOp()
			next = nil
		} else {
			next = x.proxy.Hold(mschedulertest.BeforeSend, c.nextDueRead())
		}
		passEnd.Release()
		passEnd = next
	}
	return <-done
}

// claimsOf accepts the case's claims of key: a claim statement on it, or a
// findAndModify, which names no task.
func (c *gxCase) claimsOf(key string) func(mschedulertest.Command) bool {
	claims := mschedulertest.Updating(c.x.coll.Name(), "holders."+c.wid)
	return func(cmd mschedulertest.Command) bool {
		if !claims(cmd) {
			return false
		}
		if cmd.Name == "findAndModify" {
			id, ok := cmd.Body.Lookup("query", "_id").StringValueOK()
			return !ok || id == key
		}
		return slices.ContainsFunc(cmd.Writes, func(w bson.Raw) bool {
			one := cmd
			one.Writes = []bson.Raw{w}
			id, _ := w.Lookup("q", "_id").StringValueOK()
			return id == key && claims(one)
		})
	}
}

// gxClaimSent says a claim had reached the server when the operation was
// stopped at held: a command before it (or held itself, when stopped after
// the server applied it) that claims accepts.
func gxClaimSent(cmds []mschedulertest.Command, held mschedulertest.Command, claims func(mschedulertest.Command) bool, heldApplied bool) bool {
	for _, cmd := range cmds {
		if cmd.Seq > held.Seq || cmd.Seq == held.Seq && !heldApplied {
			break
		}
		if claims(cmd) {
			return true
		}
	}
	return false
}

// checkCase checks every task of the case once the operation finished.
func (x *gxExplorer) checkCase(op gxOp, c *gxCase, where string, actions []gxAction, before bool) {
	x.t.Helper()
	docs := x.caseTasks(c)
	for _, key := range c.keys {
		if _, ok := docs[key]; !ok && !(key == c.keys[0] && c.applied["delete"]) {
			x.t.Fatalf("%s: task %s is gone\n%v", where, key, c.note)
		}
	}
	for key, raw := range docs {
		if v := mschedulertest.CheckTask(raw, gxRetention); len(v) > 0 {
			x.t.Fatalf("%s: task %s breaks invariants %v\n%s\n%v", where, key, v, raw, c.note)
		}
		conc, _ := raw.Lookup("concurrency").AsInt64OK()
		running, _ := raw.Lookup("running").AsInt64OK()
		succeeded, _ := raw.Lookup("succeeded").AsInt64OK()
		if running+succeeded > conc {
			x.t.Fatalf("%s: task %s has %d runs going and %d done of concurrency %d\n%v", where, key, running, succeeded, conc, c.note)
		}
	}
	key := c.keys[0]
	raw, ok := docs[key]
	if c.applied["delete"] {
		if ok {
			x.t.Fatalf("%s: the deleted task came back\n%s\n%v", where, raw, c.note)
		}
		return
	}
	for _, a := range actions {
		if !c.applied[a.name] {
			continue
		}
		if a.check != nil {
			if err := a.check(c, raw, before); err != nil {
				x.t.Fatalf("%s: %v\n%s\n%v", where, err, raw, c.note)
			}
		}
		if !a.stops || !before {
			continue
		}
		if slices.ContainsFunc(c.claimed, func(r gxRun) bool { return r.Key == key }) {
			x.t.Fatalf("%s: the take handed out a run of %s claimed after the action landed\n%s\n%v", where, key, raw, c.note)
		}
		if _, err := raw.LookupErr("holders", c.wid); op.take && err == nil {
			x.t.Fatalf("%s: the gateway claimed %s after the action landed\n%s\n%v", where, key, raw, c.note)
		}
	}
}

// caseTasks reads every task of the case, by key, without its runs.
func (x *gxExplorer) caseTasks(c *gxCase) map[string]bson.Raw {
	x.t.Helper()
	cur, err := x.coll.Find(x.ctx, gxCaseFilter(c.wid), options.Find().SetProjection(bson.D{{Key: "runs", Value: 0}}))
	if err != nil {
		x.t.Fatal(err)
	}
	var raws []bson.Raw
	if err := cur.All(x.ctx, &raws); err != nil {
		x.t.Fatal(err)
	}
	out := map[string]bson.Raw{}
	for _, raw := range raws {
		out[raw.Lookup("_id").StringValue()] = raw
	}
	return out
}

// gxCaseFilter selects the tasks of the case of worker id wid: their keys
// begin with it.
func gxCaseFilter(wid string) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$regex", Value: "^" + wid + "-"}}}}
}
