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
// gate, pings and run ends alone and batched, a sweep, a maintenance
// pass) through a HoldProxy that splits updates statement by statement,
// as MongoDB applies them. It first records the commands the operation
// sends; then, for every boundary (before each command or statement, and
// after the last one before its reply) and every action (each producer
// action, a second worker's claim, a sweep), it stops the operation there,
// applies the action, lets the operation finish, and checks every document
// against the owner's invariants (taskstate.Check), no more runs held or
// done than the task's concurrency, and what the action promises: a
// cancel, pause or delete stands, no claim lands after one, and a run
// claimed after a params update runs the new params.
//
// It checks each case against the reference model as well (mTask, shared
// with the state-machine test; see explore_model_test.go): the case's
// tasks as stored (status, holders, running, free, succeeded, failed_runs,
// paused, whether run_at is due now, a retry delay on or later, params,
// and the params of each run the operation claimed) must be as the model
// predicts for a serial order of the operation and the actions: the
// operation wholly before or after the action (with two, before, between
// or after them, the actions in their order). Timestamps and run ids are
// not compared. A batch operation is as atomic as each of its parts (its
// candidate read, each statement, its read back), no more: for it, the
// order in which the actions landed between two parts is allowed too.
// The plan gate has no counterpart in the model (nor have plans in the
// state-machine test): its cases keep the checks above only. Each case's
// tasks are deleted once checked, so that a task an action published anew
// (any worker may claim it) stands in no later case's way.
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
	start    *exModel // the model of the tasks once the setup ran
	// appliedCmds are the operation's commands the server had applied
	// when the actions landed; before says none of them was its claim;
	// lastApplied, that its last one was; fenceMoved, that the actions
	// moved what a claim of the first task as read is fenced on.
	appliedCmds                     []mschedulertest.Command
	before, lastApplied, fenceMoved bool
}

// exploreOp is an operation of a worker and the tasks it runs on.
type exploreOp struct {
	name  string
	tasks int                                                         // how many tasks the case publishes
	task  func(key string, c *exCase) mscheduler.Task[map[string]any] // each task, targeted at the case's workers
	setup func(c *exCase) error                                       // before the operation: claim the runs it needs
	run   func(c *exCase) error
	mayGo bool // the operation may delete the task (retention), unless an action made it run again
	// model is the operation in the reference model; parts, that of a
	// batch operation, part by part. Both are nil for the plan gate,
	// which the model does not follow (as in the state-machine test, a
	// plan's state is read from the stored task).
	model exStep
	parts []exPart
}

// serial is the model of the operation as a whole; nil without one.
func (op exploreOp) serial() exStep {
	if op.parts != nil {
		return whole(op.parts)
	}
	return op.model
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
	// model is the action in the reference model, on the case's first
	// task.
	model exStep
}

func exploreTask(c *exCase, conc int) mscheduler.Task[map[string]any] {
	return mscheduler.Task[map[string]any]{
		Params: map[string]any{"n": 1}, Concurrency: conc, MaxFailedRuns: 2,
		WorkerIDs: []string{c.wid, second(c)}, PingInterval: time.Second, WorkerTimeout: 30 * time.Second,
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
	{name: "claim alone", tasks: 1, task: plainTask(1), run: func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) },
		model: claimOne(explored, true)},
	{name: "batch claim as read", tasks: 2, task: plainTask(1), run: func(c *exCase) error {
		rs, err := c.w.ClaimBatch(c.x.ctx, 2)
		c.claimed = append(c.claimed, rs...)
		return err
	}, parts: batchClaimAsRead},
	{name: "batch claim read back", tasks: 2, task: plainTask(2), run: func(c *exCase) error {
		rs, err := c.w.ClaimBatch(c.x.ctx, 2)
		c.claimed = append(c.claimed, rs...)
		return err
	}, parts: batchClaimReadBack},
	{name: "claim by key", tasks: 1, task: plainTask(2), run: func(c *exCase) error { return c.claimedOne(c.w.ClaimByKey(c.x.ctx)) },
		parts: claimByKeyParts},
	{name: "plan gate skip", tasks: 1, task: planTask(1),
		setup: func(c *exCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) },
		run:   func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) }},
	{name: "plan gate begin", tasks: 1, task: planTask(2), run: func(c *exCase) error { return c.claimedOne(c.w.Claim(c.x.ctx)) }},
	{name: "ping", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		_, err := c.w.Ping(c.x.ctx, c.prepared[0].RunID)
		return err
	}, model: det(renew(0))},
	{name: "pings batched", tasks: 2, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		_, err := c.w.PingTogether(c.x.ctx, []string{c.prepared[0].RunID, c.prepared[1].RunID})
		return err
	}, parts: pingsTogether},
	{name: "run end", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeSucceeded))
	}, model: det(endRun(0, mscheduler.OutcomeSucceeded))},
	{name: "run end failed", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeFailed))
	}, model: det(endRun(0, mscheduler.OutcomeFailed))},
	{name: "run end released", tasks: 1, task: plainTask(2), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.End(c.x.ctx, c.prepared[0].RunID, mscheduler.OutcomeReleased))
	}, model: det(endRun(0, mscheduler.OutcomeReleased))},
	{name: "execute failing with retries", tasks: 1, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		return ignoreLost(c.w.Execute(c.x.ctx, c.prepared[0].RunID, "error"))
	}, model: det(endRun(0, mscheduler.OutcomeFailed))},
	{name: "run ends batched", tasks: 2, task: plainTask(1), setup: (*exCase).claimAll, run: func(c *exCase) error {
		ids := []string{c.prepared[0].RunID, c.prepared[1].RunID}
		return ignoreLost(errors.Join(c.w.EndTogether(c.x.ctx, ids, []mscheduler.Outcome{mscheduler.OutcomeSucceeded, mscheduler.OutcomeReleased})...))
	}, parts: endsTogether},
	{name: "sweep", tasks: 1, task: plainTask(1),
		setup: func(c *exCase) error {
			if err := c.claimAll(); err != nil {
				return err
			}
			c.w.Die()
			c.x.clock.advance(31 * time.Second) // past the run's lease
			return nil
		},
		run: func(c *exCase) error { return c.w.Sweep(c.x.ctx) }, model: det(sweep)},
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
		run: func(c *exCase) error { c.w.Maintain(c.x.ctx); return nil }, model: det(maintain)},
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
	{name: "cancel", stops: true, apply: func(c *exCase) error { return c.x.prod.Cancel(c.x.ctx, c.keys[0]) }, check: statusIs("cancelled"),
		model: onFirst(func(_ *exModel, t *xTask) {
			if t.canCancel() {
				t.cancel()
			}
		})},
	{name: "pause", stops: true, apply: func(c *exCase) error { return c.x.prod.Pause(c.x.ctx, c.keys[0]) },
		check: func(_ *exCase, doc bson.Raw, _ bool) error {
			if p, _ := doc.Lookup("paused").BooleanOK(); !p {
				return errors.New("the pause did not stand")
			}
			return nil
		}, model: onFirst(func(_ *exModel, t *xTask) { t.paused = true })},
	{name: "pause and resume", undoes: []string{"pause"}, apply: func(c *exCase) error {
		if err := c.x.prod.Pause(c.x.ctx, c.keys[0]); err != nil {
			return err
		}
		return c.x.prod.Resume(c.x.ctx, c.keys[0])
	}, model: onFirst(func(_ *exModel, t *xTask) { t.paused = false })},
	// A task without a plan refuses a skip; the model does not follow
	// plans.
	{name: "skip next", apply: func(c *exCase) error { return c.x.prod.SkipNext(c.x.ctx, c.keys[0], 1) }, model: det(func(*exModel) {})},
	{name: "retry", undoes: []string{"cancel"}, apply: func(c *exCase) error { return c.x.prod.Retry(c.x.ctx, c.keys[0]) },
		model: onFirst(func(_ *exModel, t *xTask) {
			if t.canRetry() {
				t.retry()
				t.due = dueNow
			}
		})},
	{name: "run now", apply: func(c *exCase) error { return c.x.prod.RunNow(c.x.ctx, c.keys[0]) },
		model: onFirst(func(_ *exModel, t *xTask) {
			if t.canRunNow() {
				t.due = dueNow
			}
		})},
	{name: "delete", stops: true, apply: func(c *exCase) error { return c.x.prod.Delete(c.x.ctx, c.keys[0], nil) },
		model: onFirst(func(m *exModel, t *xTask) {
			if t.canDelete() {
				delete(m.tasks, m.c.keys[0])
			}
		})},
	{name: "update params", undoes: []string{"delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, newParamsTask(c), &mscheduler.PublishOpts{UpdateParams: true})
		return err
	}, check: newParamsRun, model: publishModel(newParamsTask, func(_ *exModel, t *xTask, task mscheduler.Task[map[string]any]) {
		t.params = task.Params["n"].(int)
	})},
	{name: "edit params by hand", apply: func(c *exCase) error {
		// As in mongosh: nothing else of the task moves.
		_, err := c.x.coll.UpdateOne(c.x.ctx, bson.D{{Key: "_id", Value: c.keys[0]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "params.n", Value: 2}}}})
		return err
	}, check: newParamsRun, model: onFirst(func(_ *exModel, t *xTask) { t.params = 2 })},
	{name: "publish reset", undoes: []string{"cancel", "pause", "exclude the worker", "delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, resetTask(c), &mscheduler.PublishOpts{ResetFinished: true})
		return err
	}, model: publishModel(resetTask, func(m *exModel, t *xTask, task mscheduler.Task[map[string]any]) {
		if t.finishedForGood() {
			fresh := xPublished(task, m.now)
			fresh.oldMarks, fresh.newMarks = t.oldMarks, t.newMarks // a reset keeps the runs' history marks
			m.tasks[task.Key] = fresh
		}
	})},
	{name: "move run_at", undoes: []string{"delete"}, apply: func(c *exCase) error {
		_, err := c.x.prod.Publish(c.x.ctx, movedRunAtTask(c), &mscheduler.PublishOpts{MoveRunAt: true})
		if errors.Is(err, mscheduler.ErrInvalid) {
			return nil // a plan sets its own run_at
		}
		return err
	}, model: publishModel(movedRunAtTask, func(_ *exModel, t *xTask, _ mscheduler.Task[map[string]any]) { t.due = dueLater })},
	{name: "raise concurrency", apply: func(c *exCase) error {
		conc := raisedConcurrency
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{Concurrency: &conc})
	}, model: onFirst(func(_ *exModel, t *xTask) {
		if t.canResize(raisedConcurrency) {
			t.resize(raisedConcurrency)
		}
	})},
	{name: "exclude the worker", stops: true, apply: func(c *exCase) error {
		ids := []string{second(c)}
		return c.x.prod.Update(c.x.ctx, c.keys[0], mscheduler.TaskUpdate{WorkerIDs: &ids})
	}, model: onFirst(func(m *exModel, t *xTask) { t.workers = []string{second(m.c)} })},
	{name: "second worker claims", apply: func(c *exCase) error {
		r, err := c.w2.Claim(c.x.ctx)
		if r != nil {
			c.note = append(c.note, "second worker claimed "+r.Key)
		}
		return err
	}, model: claimOne(second, false)},
	{name: "second worker sweeps", apply: func(c *exCase) error { return c.w2.Sweep(c.x.ctx) }, model: det(sweep)},
}

// The tasks the actions publish, alike for the action and its model.

func newParamsTask(c *exCase) mscheduler.Task[map[string]any] {
	return mscheduler.Task[map[string]any]{Key: c.keys[0], Params: map[string]any{"n": 2}}
}

func resetTask(c *exCase) mscheduler.Task[map[string]any] { return plainTask(1)(c.keys[0], c) }

func movedRunAtTask(c *exCase) mscheduler.Task[map[string]any] {
	return mscheduler.Task[map[string]any]{Key: c.keys[0], RunAt: c.x.clock.wall().Add(time.Hour)}
}

const raisedConcurrency = 3

// explored and second are the ids of a case's workers: the one explored,
// and the second one.
func explored(c *exCase) string { return c.wid }

func second(c *exCase) string { return c.wid + "-2" }

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
	if c.w2, err = mscheduler.NewWorker(x.ctx, x.coll, second(c), x.clock.wall, x.clock.mono, exploreRetention); err != nil {
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
	if op.serial() != nil {
		c.start = x.startModel(c)
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
	x.checkCase(op, c, op.name, nil)
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
		x.checkCase(op, c, where, nil)
		return
	case <-hold.Reached():
		heldCmd, _ = hold.Wait(x.ctx)
	}
	fencedAsRead := slices.ContainsFunc(op.parts, func(p exPart) bool { return p.fencedAsRead })
	var fence string
	if fencedAsRead {
		fence = x.fenceOf(c.keys[0])
	}
	for _, a := range actions {
		err := a.apply(c)
		if !notApplicable(err) {
			hold.Release()
			<-done
			x.t.Fatalf("%s: action %s: %v", where, a.name, err)
		}
		c.applied[a.name] = c.applied[a.name] || err == nil
	}
	c.fenceMoved = fencedAsRead && x.fenceOf(c.keys[0]) != fence
	c.lastApplied = b.at == mschedulertest.BeforeReply
	c.appliedCmds = appliedBefore(x.proxy.Since(from), heldCmd, c.lastApplied)
	c.before = !slices.ContainsFunc(c.appliedCmds, mschedulertest.Updating(x.coll.Name(), "holders."+c.wid))
	hold.Release()
	if err := <-done; err != nil {
		x.t.Fatalf("%s: the operation: %v", where, err)
	}
	x.checkCase(op, c, where, actions)
}

// fenceOf is what a claim of the task key as read is fenced on
// (taskstate.AsReadFence), as it stands.
func (x *explorer) fenceOf(key string) string {
	raw, err := x.coll.FindOne(x.ctx, bson.D{{Key: "_id", Value: key}}, options.FindOne().SetProjection(bson.D{{Key: "runs", Value: 0}})).Raw()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return "gone"
	case err != nil:
		x.t.Fatal(err)
	}
	f, err := bson.Marshal(taskstate.AsReadFence(raw))
	if err != nil {
		x.t.Fatal(err)
	}
	return string(f)
}

func actionNames(as []exploreAction) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.name
	}
	return strings.Join(names, " then ")
}

// appliedBefore are the commands of cmds the server had applied when the
// operation was stopped at held: those before it, and held itself when
// stopped after the server applied it.
func appliedBefore(cmds []mschedulertest.Command, held mschedulertest.Command, heldApplied bool) []mschedulertest.Command {
	var out []mschedulertest.Command
	for _, cmd := range cmds {
		if cmd.Seq > held.Seq || cmd.Seq == held.Seq && !heldApplied {
			break
		}
		out = append(out, cmd)
	}
	return out
}

// checkCase checks every task of the case once the operation finished,
// then deletes them: a task an action published anew (after a delete) may
// be claimed by any worker, and would stand in a later case's way.
func (x *explorer) checkCase(op exploreOp, c *exCase, where string, actions []exploreAction) {
	x.t.Helper()
	retention := taskstate.Retention{Succeeded: exploreRetention.Succeeded, Failed: exploreRetention.Failed}
	raws := make([]bson.Raw, len(c.keys)) // nil: gone
	for i, key := range c.keys {
		raw, err := x.coll.FindOne(x.ctx, bson.D{{Key: "_id", Value: key}}, options.FindOne().SetProjection(bson.D{{Key: "runs", Value: 0}})).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			if i == 0 && stands(actions, "delete", c) || op.mayGo && !c.applied["publish reset"] && !c.applied["retry"] {
				continue
			}
			x.t.Fatalf("%s: task %s is gone", where, key)
		}
		if err != nil {
			x.t.Fatal(err)
		}
		raws[i] = raw
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
		for _, a := range actions {
			if !stands(actions, a.name, c) {
				continue
			}
			if a.check != nil {
				if err := a.check(c, raw, c.before); err != nil {
					x.t.Fatalf("%s: %v\n%s\n%v", where, err, raw, c.note)
				}
			}
			if a.stops && c.before && slices.ContainsFunc(c.claimed, func(r mscheduler.WorkerRun) bool { return r.Key == key }) {
				x.t.Fatalf("%s: the operation claimed %s after the action landed\n%s", where, key, raw)
			}
		}
	}
	if stands(actions, "delete", c) {
		if n, _ := x.coll.CountDocuments(x.ctx, bson.D{{Key: "_id", Value: c.keys[0]}}); n != 0 {
			x.t.Fatalf("%s: the deleted task came back", where)
		}
	}
	if op.serial() != nil {
		x.checkModel(op, c, where, actions, raws)
	}
	if _, err := x.coll.DeleteMany(x.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: c.keys}}}}); err != nil {
		x.t.Fatal(err)
	}
}

// checkModel checks that the case ended as the reference model says some
// serial order of the operation and the actions ends (the operation wholly
// before, between or after the actions, which keep their order), or, for a
// batch operation, the order in which the actions landed between its
// parts.
func (x *explorer) checkModel(op exploreOp, c *exCase, where string, actions []exploreAction, raws []bson.Raw) {
	x.t.Helper()
	observed := make(exOutcome, len(c.keys))
	for i, raw := range raws {
		var err error
		if observed[i], err = observedOf(raw, c.start.now, claimedParams(c, c.keys[i])); err != nil {
			x.t.Fatalf("%s: read task %s for the model: %v", where, c.keys[i], err)
		}
	}
	orders := serialOrders(c.start, op.serial(), op.name, actions)
	if o, ok := between(op, c, actions); ok {
		orders = append(orders, o)
	}
	for _, o := range orders {
		if slices.ContainsFunc(o.outcomes, observed.matches) {
			return
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the outcome is none the reference model predicts\n  observed: %s", where, observed)
	for _, o := range orders {
		for _, p := range o.outcomes {
			fmt.Fprintf(&b, "\n  predicted, %s: %s", o.name, p)
		}
	}
	if len(c.note) > 0 {
		fmt.Fprintf(&b, "\n  %s", strings.Join(c.note, "; "))
	}
	x.t.Fatal(b.String())
}

// claimedParams is params.n of the run the operation claimed of key; -1
// when it claimed none.
func claimedParams(c *exCase, key string) int {
	out := -1
	for _, r := range c.claimed {
		if r.Key == key {
			n, _ := r.Params.Document().Lookup("n").AsInt64OK()
			out = int(n)
		}
	}
	return out
}

// stands says the action named applied, and no action applied after it
// ended its promises.
func stands(actions []exploreAction, name string, c *exCase) bool {
	i := slices.IndexFunc(actions, func(a exploreAction) bool { return a.name == name })
	if i < 0 || !c.applied[name] {
		return false
	}
	return !slices.ContainsFunc(actions[i+1:], func(a exploreAction) bool { return c.applied[a.name] && slices.Contains(a.undoes, name) })
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
