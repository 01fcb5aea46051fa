package mscheduler_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// The explorer's reference model. A case's tasks are modelled as the
// state-machine test models a task (mTask, whose transitions both tests
// share), with what else decides the outcome of an operation and an
// action: the params, worker_ids, where run_at stands, and, for the
// maintenance pass, retention and history marks. The model starts from
// the tasks as the case's setup left them, and runs each serial order of
// the operation and the actions (the operation wholly before, between or
// after the actions, which keep their order); the case's outcome, as
// stored, must be one of theirs. Where the library may go either way (a
// claim of a task whose run_at a failure moved a jittered millisecond
// on), a step leaves several states, and each is an outcome.
//
// A batch operation (batch claims, pings and run ends batched) is made of
// parts, each of which the server applies whole: its candidate read, each
// statement of its write, its read back. MongoDB applies an unordered
// bulk write statement by statement, each an atomic write of its own task,
// and no more atomic together. For it, the order in which the actions
// landed between two of its parts is an outcome too (see between): that
// is how a claim statement fenced on its task as read misses a task an
// action wrote after the read but left claimable, and how a run claimed
// before a params update gets the new params from its read back. Not
// modelled: the plan gate, and tasks with a plan (as in the state-machine
// test, whose model reads a plan's state from the stored task).

// mDue is where a task's run_at stands from the case's now: the clock
// stands still during a case.
type mDue int

const (
	dueNow   mDue = iota // at or before now: a claim now finds the task due
	dueRetry             // a retry delay on (jittered, stored to the millisecond): a claim now may find it due or not
	dueLater             // an hour or more on
)

func (d mDue) String() string { return [...]string{"now", "a retry delay on", "later"}[d] }

// dueOf places a stored run_at.
func dueOf(runAt, now time.Time) mDue {
	switch {
	case !runAt.After(now):
		return dueNow
	case !runAt.After(now.Add(time.Minute)):
		return dueRetry
	}
	return dueLater
}

// xTask is a task of the explorer's model.
type xTask struct {
	*mTask
	params   int      // params.n; 0 without
	workers  []string // worker_ids: none lets any worker claim
	due      mDue
	expired  bool // finished for good and past its retention
	oldMarks bool // history marks the maintenance pass writes: older than it leaves to their worker
	newMarks bool // history marks of runs ended during the case
}

func (t *xTask) clone() *xTask {
	c := *t
	c.mTask = t.mTask.clone()
	return &c
}

// xPublished is the model of task as a publish inserts it at now.
func xPublished(task mscheduler.Task[map[string]any], now time.Time) *xTask {
	n, _ := task.Params["n"].(int)
	return &xTask{mTask: publishedTask(task), params: n, workers: task.WorkerIDs, due: dueOf(task.RunAt, now)}
}

// storedModelTask is what the model reads of a stored task.
type storedModelTask struct {
	Status     mscheduler.Status    `bson:"status"`
	Conc       int                  `bson:"concurrency"`
	MaxFailed  int                  `bson:"max_failed_runs"`
	Distinct   bool                 `bson:"distinct_workers"`
	Running    int                  `bson:"running"`
	Free       int                  `bson:"free"`
	Succeeded  int                  `bson:"succeeded"`
	FailedRuns int                  `bson:"failed_runs"`
	Paused     bool                 `bson:"paused"`
	DoneBy     []string             `bson:"done_by"`
	WorkerIDs  []string             `bson:"worker_ids"`
	RunAt      time.Time            `bson:"run_at"`
	ExpireAt   *time.Time           `bson:"expire_at"`
	Unlogged   map[string]time.Time `bson:"unlogged"`
	Holders    map[string]struct {
		Run        string    `bson:"run"`
		LeaseUntil time.Time `bson:"lease_until"`
	} `bson:"holders"`
}

func decodeModelTask(raw bson.Raw) (storedModelTask, int, bool, error) {
	var d storedModelTask
	err := bson.Unmarshal(raw, &d)
	n, _ := raw.Lookup("params", "n").AsInt64OK()
	return d, int(n), raw.Lookup("plan").Type == bson.TypeEmbeddedDocument, err
}

// xStored is the model of a stored task at now: where a case starts from.
func xStored(raw bson.Raw, now time.Time) (*xTask, error) {
	d, n, plan, err := decodeModelTask(raw)
	if err != nil {
		return nil, err
	}
	t := &xTask{mTask: &mTask{conc: d.Conc, maxFailed: d.MaxFailed, distinct: d.Distinct, plan: plan, status: d.Status,
		succ: d.Succeeded, failed: d.FailedRuns, holders: map[string]mHold{}, paused: d.Paused, doneBy: map[string]bool{}},
		params: n, workers: d.WorkerIDs, due: dueOf(d.RunAt, now)}
	for w, h := range d.Holders {
		t.holders[w] = mHold{run: h.Run, lease: h.LeaseUntil}
	}
	for _, w := range d.DoneBy {
		t.doneBy[w] = true
	}
	t.expired = t.finishedForGood() && d.ExpireAt != nil && !d.ExpireAt.After(now)
	for _, finished := range d.Unlogged {
		if finished.Before(now.Add(-maintenanceLeavesMarks)) {
			t.oldMarks = true
		} else {
			t.newMarks = true
		}
	}
	return t, nil
}

// maintenanceLeavesMarks is how long a maintenance pass leaves a run's
// history record to the worker that ended it.
const maintenanceLeavesMarks = 10 * time.Second

// exModel is a case's tasks at one point of a serial order.
type exModel struct {
	c       *exCase
	now     time.Time
	tasks   map[string]*xTask // by key; a key missing is a task not there
	claimed map[string]int    // the params of each run the operation claimed, by key
	// candidates are the tasks a batch claim read as its candidates;
	// fenceMoved, those of them whose fence as read a write moved since.
	candidates, fenceMoved map[string]bool
}

func (m *exModel) clone() *exModel {
	c := *m
	c.candidates, c.fenceMoved = maps.Clone(m.candidates), maps.Clone(m.fenceMoved)
	c.tasks, c.claimed = map[string]*xTask{}, maps.Clone(m.claimed)
	for k, t := range m.tasks {
		c.tasks[k] = t.clone()
	}
	return &c
}

// exStep is the model of an operation or an action: the states it may
// leave (more than one where the library may take either way, as a claim
// of a task its retry delay moved a fraction of a millisecond on).
type exStep func(m *exModel) []*exModel

// det is a step that leaves one state.
func det(f func(m *exModel)) exStep {
	return func(m *exModel) []*exModel { f(m); return []*exModel{m} }
}

// onFirst is an action on the case's first task, if it is there.
func onFirst(f func(m *exModel, t *xTask)) exStep {
	return det(func(m *exModel) {
		if t := m.tasks[m.c.keys[0]]; t != nil {
			f(m, t)
		}
	})
}

// mayClaim says whether worker w's claim now takes a slot of the task:
// surely, perhaps (its run_at is a retry delay on), or not.
func (m *exModel) mayClaim(key, w string) (surely, perhaps bool) {
	t := m.tasks[key]
	if t == nil || t.plan || !t.claimableBy(w) || len(t.workers) > 0 && !slices.Contains(t.workers, w) {
		return false, false
	}
	return t.due == dueNow, t.due == dueRetry
}

func (m *exModel) claim(key, w string, byOp bool) {
	t := m.tasks[key]
	t.claim(w, mHold{lease: m.now.Add(30 * time.Second)})
	if byOp {
		m.claimed[key] = t.params
	}
}

// claimOne is a claim of one slot by worker w: of any task it may claim
// (the case's tasks are due alike), or of none when it may claim none for
// sure.
func claimOne(w func(*exCase) string, byOp bool) exStep {
	return func(m *exModel) []*exModel {
		var out []*exModel
		sure := false
		for _, key := range m.c.keys {
			surely, perhaps := m.mayClaim(key, w(m.c))
			if surely || perhaps {
				n := m.clone()
				n.claim(key, w(m.c), byOp)
				out = append(out, n)
			}
			sure = sure || surely
		}
		if !sure {
			out = append(out, m)
		}
		return out
	}
}

// fork is the states of each m of ms after f, where f may leave another
// state than m as well (a clone of m it changed), or nil.
func fork(ms []*exModel, f func(m *exModel) *exModel) []*exModel {
	var out []*exModel
	for _, m := range ms {
		if n := f(m); n != nil {
			out = append(out, n)
		}
		out = append(out, m)
	}
	return out
}

// endRun is the end of the explored worker's run of the i-th task, if its
// run still holds the task: a failure counted moves run_at a retry delay
// on, unless it is later already.
func endRun(i int, outcome mscheduler.Outcome) func(*exModel) {
	return func(m *exModel) {
		t := m.tasks[m.c.keys[i]]
		if t == nil {
			return
		}
		if _, held := t.holders[m.c.wid]; !held {
			return
		}
		t.end(m.c.wid, outcome)
		t.newMarks = true
		if outcome == mscheduler.OutcomeFailed {
			t.due = max(t.due, dueRetry)
		}
	}
}

// renew is a ping of the explored worker's run of the i-th task: its
// lease renewed, if its run still holds the task.
func renew(i int) func(*exModel) {
	return func(m *exModel) {
		if t := m.tasks[m.c.keys[i]]; t != nil {
			if h, held := t.holders[m.c.wid]; held {
				h.lease = m.now.Add(30 * time.Second)
				t.holders[m.c.wid] = h
			}
		}
	}
}

// sweep expires every run whose lease lapsed.
func sweep(m *exModel) {
	for _, t := range m.tasks {
		for _, w := range t.lapsed(m.now) {
			t.end(w, mscheduler.OutcomeExpired)
			t.newMarks = true
		}
	}
}

// maintain is a maintenance pass: it deletes the tasks finished for good
// past their retention whose history is written, then writes the history
// records older than it leaves to their workers.
func maintain(m *exModel) {
	for key, t := range m.tasks {
		if t.expired && t.finishedForGood() && !t.oldMarks && !t.newMarks {
			delete(m.tasks, key)
		}
		t.oldMarks = false
	}
}

// publishModel is an action's publish of task: inserted when the key is
// not there; when it is, update applies to it.
func publishModel(task func(*exCase) mscheduler.Task[map[string]any], update func(m *exModel, t *xTask, task mscheduler.Task[map[string]any])) exStep {
	return det(func(m *exModel) {
		task := task(m.c)
		if t := m.tasks[task.Key]; t != nil {
			update(m, t, task)
			return
		}
		m.tasks[task.Key] = xPublished(task, m.now)
	})
}

// exObserved is a task of a case as stored once the case ran, in the
// terms the model predicts.
type exObserved struct {
	gone                           bool
	status                         mscheduler.Status
	holders                        string // the workers, in order
	running, free, succeeded, fail int
	paused                         bool
	due                            mDue
	params                         int
	claimed                        int // the params of the run the operation claimed; -1: none
}

func (o exObserved) String() string {
	if o.gone {
		return "gone"
	}
	claimed := "none"
	if o.claimed >= 0 {
		claimed = fmt.Sprintf("params n=%d", o.claimed)
	}
	return fmt.Sprintf("%s, holders [%s], running %d, free %d, succeeded %d, failed_runs %d, paused %v, run_at %s, params n=%d, run claimed: %s",
		o.status, o.holders, o.running, o.free, o.succeeded, o.fail, o.paused, o.due, o.params, claimed)
}

// matches says the stored o is as the model's p: a run_at a retry delay
// on may have been stored at now.
func (o exObserved) matches(p exObserved) bool {
	if p.due == dueRetry && o.due == dueNow {
		o.due = dueRetry
	}
	return o == p
}

// observedOf is the stored task raw, or gone when raw is nil.
func observedOf(raw bson.Raw, now time.Time, claimed int) (exObserved, error) {
	if raw == nil {
		return exObserved{gone: true, claimed: -1}, nil
	}
	d, n, _, err := decodeModelTask(raw)
	if err != nil {
		return exObserved{}, err
	}
	return exObserved{status: d.Status, holders: strings.Join(slices.Sorted(maps.Keys(d.Holders)), " "),
		running: d.Running, free: d.Free, succeeded: d.Succeeded, fail: d.FailedRuns, paused: d.Paused,
		due: dueOf(d.RunAt, now), params: n, claimed: claimed}, nil
}

// predictedOf is the model's task key, as observedOf has a stored one.
func (m *exModel) predictedOf(key string) exObserved {
	claimed, ok := m.claimed[key]
	if !ok {
		claimed = -1
	}
	t := m.tasks[key]
	if t == nil {
		return exObserved{gone: true, claimed: claimed}
	}
	return exObserved{status: t.status, holders: strings.Join(slices.Sorted(maps.Keys(t.holders)), " "),
		running: len(t.holders), free: t.free(), succeeded: t.succ, fail: t.failed, paused: t.paused,
		due: t.due, params: t.params, claimed: claimed}
}

// exOutcome is the case's tasks, in the order of its keys.
type exOutcome []exObserved

func (o exOutcome) matches(p exOutcome) bool {
	return slices.EqualFunc(o, p, exObserved.matches)
}

func (o exOutcome) String() string {
	parts := make([]string, len(o))
	for i, t := range o {
		parts[i] = fmt.Sprintf("task %c: %s", 'a'+i, t)
	}
	return strings.Join(parts, "; ")
}

// startModel reads the case's tasks once its setup ran: the state the
// serial orders start from.
func (x *explorer) startModel(c *exCase) *exModel {
	cur, err := x.coll.Find(x.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: c.keys}}}}, options.Find().SetProjection(bson.D{{Key: "runs", Value: 0}}))
	if err != nil {
		x.t.Fatal(err)
	}
	var raws []bson.Raw
	if err := cur.All(x.ctx, &raws); err != nil {
		x.t.Fatal(err)
	}
	m := &exModel{c: c, now: c.w.Now(), tasks: map[string]*xTask{}, claimed: map[string]int{}}
	for _, raw := range raws {
		t, err := xStored(raw, m.now)
		if err != nil {
			x.t.Fatalf("read the model of %s: %v", raw, err)
		}
		m.tasks[raw.Lookup("_id").StringValue()] = t
	}
	return m
}

// runOrder runs the model's steps from start, and returns the outcomes
// they may have.
func runOrder(start *exModel, name string, steps []exStep) exOrder {
	states := []*exModel{start.clone()}
	for _, step := range steps {
		states = runStep(states, step)
	}
	order := exOrder{name: name}
	for _, s := range states {
		o := make(exOutcome, len(start.c.keys))
		for k, key := range start.c.keys {
			o[k] = s.predictedOf(key)
		}
		order.outcomes = append(order.outcomes, o)
	}
	return order
}

// runStep is the states step may leave from each of states.
func runStep(states []*exModel, step exStep) []*exModel {
	var next []*exModel
	for _, s := range states {
		next = append(next, step(s)...)
	}
	for _, s := range next {
		for _, t := range s.tasks {
			t.expired = t.expired && t.finishedForGood() // a task that ran again has a retention of its own
		}
	}
	return next
}

// exOrder is one serial order of the operation and a case's actions, and
// the outcomes the model predicts for it.
type exOrder struct {
	name     string
	outcomes []exOutcome
}

// serialOrders are the model's outcomes of every serial order of the
// operation and the actions that keeps the actions in their order.
func serialOrders(start *exModel, op exStep, opName string, actions []exploreAction) []exOrder {
	var out []exOrder
	for i := 0; i <= len(actions); i++ {
		var names []string
		steps := []exStep{}
		for j, a := range actions {
			if j == i {
				names, steps = append(names, opName), append(steps, op)
			}
			names, steps = append(names, a.name), append(steps, a.model)
		}
		if i == len(actions) {
			names, steps = append(names, opName), append(steps, op)
		}
		out = append(out, runOrder(start, strings.Join(names, ", then "), steps))
	}
	return out
}

// exPart is a part of a batch operation that the server applies whole:
// its candidate read, one statement of its write (MongoDB applies an
// unordered write statement by statement, and so does the explorer's
// proxy), its read back. Each statement is a write of its own task, as
// atomic as a single claim, ping or run end, and no more: actions may
// land between two of them.
type exPart struct {
	name string
	step exStep
	// done says the part had been applied when the operation was held,
	// by the commands the server had applied by then.
	done func(c *exCase, applied []mschedulertest.Command) bool
	// fencedAsRead says the part is a claim's statement fenced on its
	// task as read (taskstate.AsReadFence).
	fencedAsRead bool
}

// whole is the model of an operation made of parts: one after the other.
func whole(parts []exPart) exStep {
	return func(m *exModel) []*exModel {
		states := []*exModel{m}
		for _, p := range parts {
			states = runStep(states, p.step)
		}
		return states
	}
}

// candidateRead is a batch claim's read of its candidates: every task the
// explored worker may claim now.
var candidateRead = exPart{name: "its candidate read",
	step: func(m *exModel) []*exModel {
		m.candidates, m.fenceMoved = map[string]bool{}, nil
		states := []*exModel{m}
		for _, key := range m.c.keys {
			states = fork(states, func(m *exModel) *exModel {
				surely, perhaps := m.mayClaim(key, m.c.wid)
				var not *exModel
				if perhaps {
					not = m.clone()
				}
				m.candidates[key] = surely || perhaps
				return not
			})
		}
		return states
	},
	done: func(c *exCase, applied []mschedulertest.Command) bool {
		return slices.ContainsFunc(applied, func(cmd mschedulertest.Command) bool {
			return cmd.Name == "find" && cmd.Collection == c.x.coll.Name()
		})
	}}

// claimStatement is a batch claim's statement claiming the i-th task: it
// claims a candidate the worker may still claim, and, fenced as read,
// misses one whose fence moved since the read (even when the task is
// still claimable: a pause and resume moves rev). The run gets the params
// as read: the fence held them.
func claimStatement(i int, asRead bool) exPart {
	return exPart{name: fmt.Sprintf("its claim of task %c", 'a'+i), fencedAsRead: asRead, done: statementOn(i),
		step: det(func(m *exModel) {
			key := m.c.keys[i]
			if !m.candidates[key] || asRead && m.fenceMoved[key] {
				return
			}
			if surely, perhaps := m.mayClaim(key, m.c.wid); surely || perhaps { // due at the read, due now: the clock stands still
				m.claim(key, m.c.wid, true)
			}
		})}
}

// claimReadBack is the read back of a batch claim that is not fenced as
// read: each run it claimed gets the params of its task as they stand.
var claimReadBack = exPart{name: "its read back",
	step: det(func(m *exModel) {
		for key := range m.claimed {
			if t := m.tasks[key]; t != nil {
				m.claimed[key] = t.params
			}
		}
	}),
	done: func(c *exCase, _ []mschedulertest.Command) bool { return c.lastApplied }}

// pingStatement is a batched ping's statement renewing the lease of the
// explored worker's run of the i-th task.
func pingStatement(i int) exPart {
	return exPart{name: fmt.Sprintf("its ping of task %c", 'a'+i), done: statementOn(i), step: det(renew(i))}
}

// endStatement ends the explored worker's run of the i-th task.
func endStatement(i int, outcome mscheduler.Outcome) exPart {
	return exPart{name: fmt.Sprintf("its end of the run of task %c", 'a'+i), done: statementOn(i), step: det(endRun(i, outcome))}
}

// statementOn says a statement of an update of the i-th task was applied.
func statementOn(i int) func(*exCase, []mschedulertest.Command) bool {
	return func(c *exCase, applied []mschedulertest.Command) bool {
		return slices.ContainsFunc(applied, func(cmd mschedulertest.Command) bool {
			return cmd.Name == "update" && cmd.Collection == c.x.coll.Name() && slices.ContainsFunc(cmd.Writes, func(w bson.Raw) bool {
				id, _ := w.Lookup("q", "_id").StringValueOK()
				return id == c.keys[i]
			})
		})
	}
}

// claimOfFirstByKey is a claim of one slot of the first task by its _id,
// a findAndModify: it claims a candidate the worker may still claim, and
// the run gets the params as they stand (the reply is the task as
// claimed).
var claimOfFirstByKey = exPart{name: "its claim of task a by _id",
	done: func(c *exCase, applied []mschedulertest.Command) bool {
		return slices.ContainsFunc(applied, func(cmd mschedulertest.Command) bool {
			id, _ := cmd.Body.Lookup("query", "_id").StringValueOK()
			return cmd.Name == "findAndModify" && cmd.Collection == c.x.coll.Name() && id == c.keys[0]
		})
	},
	step: det(func(m *exModel) {
		key := m.c.keys[0]
		if !m.candidates[key] {
			return
		}
		if surely, perhaps := m.mayClaim(key, m.c.wid); surely || perhaps {
			m.claim(key, m.c.wid, true)
		}
	})}

// batchClaimAsRead and the others are the parts of the batch operations.
var (
	batchClaimAsRead   = []exPart{candidateRead, claimStatement(0, true), claimStatement(1, true)}
	batchClaimReadBack = []exPart{candidateRead, claimStatement(0, false), claimStatement(1, false), claimReadBack}
	claimByKeyParts    = []exPart{candidateRead, claimOfFirstByKey}
	pingsTogether      = []exPart{pingStatement(0), pingStatement(1)}
	endsTogether       = []exPart{endStatement(0, mscheduler.OutcomeSucceeded), endStatement(1, mscheduler.OutcomeReleased)}
)

// between is the order in which the actions landed inside a batch
// operation: the parts the server had applied, the actions, then the
// others, each part as atomic as the model has it. Where a part after the
// actions is a claim fenced on its task as read, the read before them,
// the model takes the fence as moved when the actions moved it (the
// explorer compares the first task's fence before and after them): the
// model does not follow rev and updated_at. It is none when the actions
// landed before or after every part: the serial orders have it.
func between(op exploreOp, c *exCase, actions []exploreAction) (exOrder, bool) {
	var before, after []exPart
	for _, p := range op.parts {
		if p.done(c, c.appliedCmds) {
			before = append(before, p)
		} else {
			after = append(after, p)
		}
	}
	if len(actions) == 0 || len(before) == 0 || len(after) == 0 {
		return exOrder{}, false
	}
	var steps []exStep
	names := []string{op.name + ": " + before[0].name}
	for i, p := range before {
		steps = append(steps, p.step)
		if i > 0 {
			names = append(names, p.name)
		}
	}
	for _, a := range actions {
		steps, names = append(steps, a.model), append(names, a.name)
	}
	steps = append(steps, det(func(m *exModel) {
		if c.fenceMoved && m.candidates != nil {
			m.fenceMoved = map[string]bool{c.keys[0]: true}
		}
	}))
	for _, p := range after {
		steps, names = append(steps, p.step), append(names, p.name)
	}
	return runOrder(c.start, strings.Join(names, ", then "), steps), true
}
