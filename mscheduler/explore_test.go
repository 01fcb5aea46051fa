package mscheduler_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// The interleaving explorer runs each multi-command operation of a worker
// (a claim alone, batch claims with and without a read back, the plan
// gate, pings and run ends alone and batched, a sweep, a maintenance pass) through a HoldProxy
// that splits updates statement by statement, as MongoDB applies
// them. It first records the commands the operation sends; then, for every
// boundary (before each command or statement, and after the last one
// before its reply) and every action (each producer action, a second
// worker's claim, a sweep), it stops the operation there, applies the
// action, lets the operation finish, and checks every document against
// the owner's invariants (taskstate.Check), no more runs held or done
// than the task's concurrency, and what the action promises: a cancel,
// pause or delete stands, no claim lands after one, and a run claimed
// after a params update runs the new params.
//
// Depth 1 (one action at one boundary) is enumerated in full. With
// -explore.depth=2, pairs of actions at one boundary are sampled as well:
// -explore.samples of them, from -explore.seed.

var (
	exploreDepth   = flag.Int("explore.depth", 1, "1: every (operation, boundary, action); 2: also sampled pairs")
	exploreSamples = flag.Int("explore.samples", 300, "depth-2 cases sampled")
	exploreSeed    = flag.Uint64("explore.seed", 0, "seed of the depth-2 samples (0: from the time)")
)

// exploreRetention keeps finished tasks, so that a case's checks see them.
var exploreRetention = mscheduler.Retention{Succeeded: time.Hour, Failed: time.Hour}

// explorer holds what every case of one operation shares: its collection,
// direct and through the proxy, the clock, and the producer.
type explorer struct {
	t     *testing.T
	ctx   context.Context
	coll  *mongo.Collection // direct: the test's own actions
	held  *mongo.Collection // through the proxy: the explored worker
	proxy *mschedulertest.HoldProxy
	clock *fakeClock
	prod  *mscheduler.Producer[map[string]any]
	first *mscheduler.Worker // whose clock measurement every worker shares
	cases int
}

// exCase is one case: its keys, the explored worker (through the proxy)
// and a second one (direct), the runs prepared and the runs the operation
// claimed.
type exCase struct {
	x        *explorer
	keys     []string // the case's tasks; actions apply to keys[0]
	wid      string
	w, w2    *mscheduler.Worker
	prepared []mscheduler.WorkerRun
	claimed  []mscheduler.WorkerRun
	applied  map[string]bool // the actions that applied (not refused as not applicable)
	note     []string
}

// exploreOp is an operation of a worker and the tasks it runs on.
type exploreOp struct {
	name  string
	tasks int                                                         // how many tasks the case publishes
	task  func(key string, c *exCase) mscheduler.Task[map[string]any] // each task, targeted at the case's workers
	setup func(c *exCase) error                                       // before the operation: claim the runs it needs
	run   func(c *exCase) error
	mayGo bool // the operation may delete the task (retention), unless an action made it run again
}

// exploreAction is what the test does while the operation is held.
type exploreAction struct {
	name  string
	apply func(c *exCase) error
	// stops says that once the action landed, no claim of the case's task
	// may land after it.
	stops bool
	// check says what must hold once the operation finished; before says
	// the action landed before the operation's claim of keys[0] was sent.
	check func(c *exCase, doc bson.Raw, before bool) error
	// undoes names the actions whose promises this one ends when it
	// applies after them (a retry after a cancel).
	undoes []string
}

func exploreTask(c *exCase, conc int) mscheduler.Task[map[string]any] {
	return mscheduler.Task[map[string]any]{
		Params: map[string]any{"n": 1}, Concurrency: conc, MaxFailedRuns: 2,
		WorkerIDs: []string{c.wid, c.wid + "-2"}, PingInterval: time.Second, WorkerTimeout: 30 * time.Second,
		RetryDelay: time.Millisecond,
	}
}

func plainTask(conc int) func(string, *exCase) mscheduler.Task[map[string]any] {
	return func(key string, c *exCase) mscheduler.Task[map[string]any] {
		t := exploreTask(c, conc)
		t.Key = key
		return t
	}
}

func planTask(conc int) func(string, *exCase) mscheduler.Task[map[string]any] {
	return func(key string, c *exCase) mscheduler.Task[map[string]any] {
		t := plainTask(conc)(key, c)
		p := mscheduler.Every(1, mscheduler.Hour)
		t.Plan = &p
		return t
	}
}

func (c *exCase) claimAll() error {
	for range c.keys {
		r, err := c.w.Claim(c.x.ctx)
		if err != nil {
			return err
		}
		if r != nil {
			c.prepared = append(c.prepared, *r)
		}
	}
	if len(c.prepared) != len(c.keys) {
		return fmt.Errorf("setup claimed %d runs of %d tasks", len(c.prepared), len(c.keys))
	}
	return nil
}

func (c *exCase) claimedOne(r *mscheduler.WorkerRun, err error) error {
	if r != nil {
		c.claimed = append(c.claimed, *r)
	}
	return err
}

var exploreOps = []exploreOp{
	{name: "claim alone", tasks: 1, task: plainTask(1), run: func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) }},
	{name: "batch claim as read", tasks: 2, task: plainTask(1), run: func(c *exCase) error {
		rs, err := c.w.ClaimBatch(c.x.ctx, 2)
		c.claimed = append(c.claimed, rs...)
		return err
	}},
	{name: "batch claim read back", tasks: 2, task: plainTask(2), run: func(c *exCase) error {
		rs, err := c.w.ClaimBatch(c.x.ctx, 2)
		c.claimed = append(c.claimed, rs...)
		return err
	}},
	{name: "plan gate skip", tasks: 1, task: planTask(1),
		setup: func(c *exCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) },
		run:   func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) }},
	{name: "plan gate begin", tasks: 1, task: planTask(2), run: func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) }},
	{name: "ping", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		_, err := c.w.Ping(c.x.ctx, c.prepared[0].RunID)
		return err
	}},
	{name: "pings batched", tasks: 2, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		_, err := c.w.PingTogether(c.x.ctx, []string{c.prepared[0].RunID, c.prepared[1].RunID})
		return err
	}},
	{name: "run end", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeSucceeded))
	}},
	{name: "run end failed", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeFailed))
	}},
	{name: "run end released", tasks: 1, task: plainTask(2), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeReleased))
	}},
	{name: "execute failing with retries", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.Execute(c.x.ctx, c.prepared[0].RunID, "error"))
	}},
	{name: "run ends batched", tasks: 2, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		ids := []string{c.prepared[0].RunID, c.prepared[1].RunID}
		return ignoreLost(errors.Join(c.w.EndTogether(c.x.ctx, ids, []mscheduler.Outcome{mscheduler.OutcomeSucceeded, mscheduler.OutcomeReleased})...))
	}},
	{name: "sweep", tasks: 1, task: plainTask(1),
		setup: func(c *exCase) error {
			if err := c.claimAll(); err != nil {
				return err
			}
			c.w.Die()
			c.x.clock.advance(31 * time.Second) // past the run's lease
			return nil
		},
		run: func(c *exCase) error { return c.w.Sweep(c.x.ctx) }},
	{name: "maintenance pass", tasks: 1, task: plainTask(1), mayGo: true,
		setup: func(c *exCase) error {
			if err := c.claimAll(); err != nil {
				return err
			}
			if err := c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeSucceeded); err != nil {
				return err
			}
			c.x.clock.advance(2 * exploreRetention.Succeeded) // past the finished task's retention
			return nil
		},
		run: func(c *exCase) error { c.w.Maintain(c.x.ctx); return nil }},
}

func ignoreLost(err error) error {
	if errors.Is(err, mscheduler.ErrLeaseLost) {
		return nil
	}
	return err
}

// notApplicable is an action refused for the task as it stands (retry of
// a pending task, a skip of a task without a plan): nothing to check.
func notApplicable(err error) bool {
	return err == nil || errors.Is(err, mscheduler.ErrNotApplicable) || errors.Is(err, mscheduler.ErrInvalid) || errors.Is(err, mscheduler.ErrNotFound)
}

// newParamsRun says every run of the task claimed after its params
// changed runs the new ones.
func newParamsRun(c *exCase, _ bson.Raw, before bool) error {
	for _, r := range c.claimed {
		n, _ := r.Params.Document().Lookup("n").AsInt64OK()
		if r.Key == c.keys[0] && before && n != 2 {
			return fmt.Errorf("run %s claimed after the params changed runs params %s", r.RunID, r.Params)
		}
	}
	return nil
}

func statusIs(want string) func(*exCase, bson.Raw, bool) error {
	return func(_ *exCase, doc bson.Raw, _ bool) error {
		if got, _ := doc.Lookup("status").StringValueOK(); got != want {
			return fmt.Errorf("status %q after the action, want %q", got, want)
		}
		return nil
	}
}

var exploreActions = []exploreAction{
	{name: "cancel", stops: true, apply: func(c *exCase) error { return c.x.prod.Cancel(c.x.ctx, c.keys[0]) }, check: statusIs("cancelled")},
	{name: "pause", stops: true, apply: func(c *exCase) error { return c.x.prod.Pause(c.x.ctx, c.keys[0]) },
		check: func(_ *exCase, doc bson.Raw, _ bool) error {
			if p, _ := doc.Lookup("paused").BooleanOK(); !p {
				return errors.New("the pause did not stand")
			}
			return nil
		}},
	{name: "pause and resume", undoes: []string{"pause"}, apply: func(c *exCase) error {
		if err := c.x.prod.Pause(c.x.ctx, c.keys[0]); err != nil {
			return err
		}
		return c.x.prod.Resume(c.x.ctx, c.keys[0])
	}},
	{name: "skip next", apply: func(c *exCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) }},
	{name: "retry", undoes: []string{"cancel"}, apply: func(c *exCase) error { return c.x.prod.Retry(c.x.ctx, c.keys[0]) }},
	{name: "run now", apply: func(c *exCase) error { return c.x.prod.RunNow(c.x.ctx, c.keys[0]) }},
	{name: "delete", stops: true, apply: func(c *exCase) error { return c.x.prod.Delete(c.x.ctx, c.keys[0], nil) }},
	{name: "update params", undoes: []string{"delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, mscheduler.Task[map[string]any]{Key: c.keys[0], Params: map[string]any{"n": 2}}, &mscheduler.PublishOpts{UpdateParams: true})
		return err
	}, check: newParamsRun},
	{name: "edit params by hand", apply: func(c *exCase) error {
		// As in mongosh: nothing else of the task moves.
		_, err := c.x.coll.UpdateOne(c.x.ctx, bson.D{{Key: "_id", Value: c.keys[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "params.n", Value: 2}}}})
		return err
	}, check: newParamsRun},
	{name: "publish reset", undoes: []string{"cancel", "exclude the worker", "delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, plainTask(1)(c.keys[0], c), &mscheduler.PublishOpts{ResetFinished: true})
		return err
	}},
	{name: "move run_at", undoes: []string{"delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, mscheduler.Task[map[string]any]{Key: c.keys[0], RunAt: c.x.clock.wall().Add(time.Hour)}, &mscheduler.PublishOpts{MoveRunAt: true})
		if errors.Is(err, mscheduler.ErrInvalid) {
			return nil // a plan sets its own run_at
		}
		return err
	}},
	{name: "raise concurrency", apply: func(c *exCase) error {
		conc := 3
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{Concurrency: &conc})
	}},
	{name: "exclude the worker", stops: true, apply: func(c *exCase) error {
		ids := []string{c.wid + "-2"}
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{WorkerIDs: &ids})
	}},
	{name: "second worker claims", apply: func(c *exCase) error {
		r, err := c.w2.Claim(c.x.ctx)
		if r != nil {
			c.note = append(c.note, "second worker claimed "+r.Key)
		}
		return err
	}},
	{name: "second worker sweeps", apply: func(c *exCase) error { return c.w2.Sweep(c.x.ctx) }},
}

// boundary is where a case stops the operation: before its n-th command
// (from 1), or after its last one, before the reply.
type boundary struct {
	n  int
	at mschedulertest.HoldPoint
}

func (b boundary) String() string {
	if b.at == mschedulertest.BeforeReply {
		return fmt.Sprintf("after command %d", b.n)
	}
	return fmt.Sprintf("before command %d", b.n)
}

func TestExploreInterleavings(t *testing.T) {
	total := 0
	for _, op := range exploreOps {
		t.Run(op.name, func(t *testing.T) {
			x := newExplorer(t)
			cmds := x.record(op)
			var bounds []boundary
			for n := 1; n <= len(cmds); n++ {
				bounds = append(bounds, boundary{n: n, at: mschedulertest.BeforeSend})
			}
			bounds = append(bounds, boundary{n: len(cmds), at: mschedulertest.BeforeReply})
			for _, b := range bounds {
				for _, a := range exploreActions {
					x.explore(op, b, []exploreAction{a})
				}
			}
			if *exploreDepth >= 2 {
				x.sample(op, bounds)
			}
			t.Logf("%s: %d commands (%s), %d cases", op.name, len(cmds), strings.Join(cmds, ", "), x.cases-1)
			total += x.cases - 1
		})
	}
	t.Logf("explored %d (operation, boundary, action) cases at depth %d", total, *exploreDepth)
	fmt.Printf("interleaving explorer: %d (operation, boundary, action) cases at depth %d\n", total, *exploreDepth)
}

func newExplorer(t *testing.T) *explorer {
	coll := mschedulertest.Collection(t)
	ctx := context.Background()
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	proxy, held := heldCollection(t, coll, true)
	clock := &fakeClock{base: time.Now()}
	prod, err := mscheduler.NewProducer[map[string]any](coll, &mscheduler.ProducerConfig{Clock: clock.wall, Monotonic: clock.mono, Retention: exploreRetention})
	if err != nil {
		t.Fatal(err)
	}
	first, err := mscheduler.NewWorker(ctx, coll, "explorer", clock.wall, clock.mono, exploreRetention)
	if err != nil {
		t.Fatal(err)
	}
	mscheduler.ShareClock(first, prod)
	return &explorer{t: t, ctx: ctx, coll: coll, held: held, proxy: proxy, clock: clock, prod: prod, first: first}
}

// newCase publishes the operation's tasks for a case of its own workers
// and runs its setup.
func (x *explorer) newCase(op exploreOp) *exCase {
	x.cases++
	c := &exCase{x: x, wid: fmt.Sprintf("w%d", x.cases), applied: map[string]bool{}}
	var err error
	if c.w, err = mscheduler.NewWorker(x.ctx, x.held, c.wid, x.clock.wall, x.clock.mono, exploreRetention); err != nil {
		x.t.Fatal(err)
	}
	if c.w2, err = mscheduler.NewWorker(x.ctx, x.coll, c.wid+"-2", x.clock.wall, x.clock.mono, exploreRetention); err != nil {
		x.t.Fatal(err)
	}
	mscheduler.ShareClock[map[string]any](x.first, nil, c.w, c.w2)
	for i := range op.tasks {
		key := fmt.Sprintf("%s-%c", c.wid, 'a'+i)
		c.keys = append(c.keys, key)
		if _, err := x.prod.Publish(x.ctx, op.task(key, c), nil); err != nil {
			x.t.Fatal(err)
		}
	}
	// The clock stands still until a case moves it: the tasks are due at
	// once, and an action's writes carry the publish's own time, as two
	// writes within one millisecond do.
	if op.setup != nil {
		if err := op.setup(c); err != nil {
			x.t.Fatalf("%s: setup: %v", op.name, err)
		}
	}
	return c
}

// record runs the operation once, unheld, and returns the commands it
// sent, as the boundaries to explore.
func (x *explorer) record(op exploreOp) []string {
	c := x.newCase(op)
	from := x.proxy.Seq()
	if err := op.run(c); err != nil {
		x.t.Fatalf("%s: %v", op.name, err)
	}
	var out []string
	for _, cmd := range x.proxy.Since(from) {
		if !cmd.Monitoring() {
			out = append(out, describe(cmd, x.coll.Name()))
		}
	}
	if len(out) == 0 {
		x.t.Fatalf("%s sent no command", op.name)
	}
	x.checkCase(op, c, op.name, nil, false)
	return out
}

// describe names a command as the explorer's log lists it: its name, the
// statement of a split write, and the collection when it is not the task
// collection itself (its .meta or .runs, say).
func describe(c mschedulertest.Command, tasks string) string {
	out := c.Name
	if c.Statements > 0 {
		out += fmt.Sprintf(" %d/%d", c.Statement+1, c.Statements)
	}
	if c.Collection != tasks {
		out += " on " + strings.TrimPrefix(c.Collection, tasks)
	}
	return out
}

// explore runs one case: the operation stopped at b while actions apply.
func (x *explorer) explore(op exploreOp, b boundary, actions []exploreAction) {
	c := x.newCase(op)
	where := fmt.Sprintf("%s, %s, %s", op.name, b, actionNames(actions))
	hold := x.proxy.Hold(b.at, mschedulertest.Nth(b.n, func(cmd mschedulertest.Command) bool { return !cmd.Monitoring() }))
	from := x.proxy.Seq()
	done := make(chan error, 1)
	go func() { done <- op.run(c) }()
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
	for _, a := range actions {
		err := a.apply(c)
		if !notApplicable(err) {
			hold.Release()
			<-done
			x.t.Fatalf("%s: action %s: %v", where, a.name, err)
		}
		c.applied[a.name] = err == nil
	}
	before := !claimSent(x.proxy.Since(from), heldCmd, c.wid, b.at == mschedulertest.BeforeReply)
	hold.Release()
	if err := <-done; err != nil {
		x.t.Fatalf("%s: the operation: %v", where, err)
	}
	x.checkCase(op, c, where, actions, before)
}

func actionNames(as []exploreAction) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.name
	}
	return strings.Join(names, " then ")
}

// claimSent says a claim by worker wid had reached the server when the
// operation was stopped at held: a command before it (or held itself, when
// stopped after the server applied it) that claims for wid.
func claimSent(cmds []mschedulertest.Command, held mschedulertest.Command, wid string, heldApplied bool) bool {
	claims := mschedulertest.Updating(held.Collection, "holders."+wid)
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
func (x *explorer) checkCase(op exploreOp, c *exCase, where string, actions []exploreAction, before bool) {
	x.t.Helper()
	retention := taskstate.Retention{Succeeded: exploreRetention.Succeeded, Failed: exploreRetention.Failed}
	for i, key := range c.keys {
		raw, err := x.coll.FindOne(x.ctx, bson.D{{Key: "_id", Value: key}}, options.FindOne().SetProjection(bson.D{{Key: "runs", Value: 0}})).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			if i == 0 && c.applied["delete"] && !undone(actions, "delete", c) || op.mayGo && !c.applied["publish reset"] && !c.applied["retry"] {
				continue
			}
			x.t.Fatalf("%s: task %s is gone", where, key)
		}
		if err != nil {
			x.t.Fatal(err)
		}
		if v := taskstate.Check(raw, retention); len(v) > 0 {
			x.t.Fatalf("%s: task %s breaks invariants %v\n%s\n%v", where, key, v, raw, c.note)
		}
		conc, _ := raw.Lookup("concurrency").AsInt64OK()
		running, _ := raw.Lookup("running").AsInt64OK()
		succeeded, _ := raw.Lookup("succeeded").AsInt64OK()
		if running+succeeded > conc {
			x.t.Fatalf("%s: task %s has %d runs going and %d done of concurrency %d", where, key, running, succeeded, conc)
		}
		if i > 0 {
			continue
		}
		for j, a := range actions {
			if !c.applied[a.name] || undone(actions[j+1:], a.name, c) {
				continue
			}
			if a.check != nil {
				if err := a.check(c, raw, before); err != nil {
					x.t.Fatalf("%s: %v\n%s\n%v", where, err, raw, c.note)
				}
			}
			if a.stops && before && slices.ContainsFunc(c.claimed, func(r mscheduler.WorkerRun) bool { return r.Key == key }) {
				x.t.Fatalf("%s: the operation claimed %s after the action landed\n%s", where, key, raw)
			}
		}
	}
	if c.applied["delete"] && !undone(actions[slices.IndexFunc(actions, func(a exploreAction) bool { return a.name == "delete" })+1:], "delete", c) {
		if n, _ := x.coll.CountDocuments(x.ctx, bson.D{{Key: "_id", Value: c.keys[0]}}); n != 0 {
			x.t.Fatalf("%s: the deleted task came back", where)
		}
	}
}

// undone says an action applied among later ends the promises of the
// action named.
func undone(later []exploreAction, name string, c *exCase) bool {
	return slices.ContainsFunc(later, func(a exploreAction) bool { return c.applied[a.name] && slices.Contains(a.undoes, name) })
}

// sample runs depth-2 cases: two actions at one boundary.
func (x *explorer) sample(op exploreOp, bounds []boundary) {
	seed := *exploreSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	x.t.Logf("depth-2 seed %d", seed)
	per := max(1, *exploreSamples/len(exploreOps))
	for range per {
		b := bounds[rng.IntN(len(bounds))]
		a1, a2 := exploreActions[rng.IntN(len(exploreActions))], exploreActions[rng.IntN(len(exploreActions))]
		x.explore(op, b, []exploreAction{a1, a2})
	}
}
