package soak

import (
	"bufio"
	"bytes"
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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
	"github.com/mscheduler/mscheduler/worker/soak/histcheck"
)

// The vandal soak: TestSoak's workers, kills and task mix, with a vandal
// editing documents by hand meanwhile (see the package documentation).
const (
	// vandalEvery (plus up to vandalJitter) is the pace of the edits.
	vandalEvery  = 250 * time.Millisecond
	vandalJitter = 250 * time.Millisecond
	// vandalStopBefore is how long before the kills stop the vandal
	// stops: more than the longest time between two kills (killEvery +
	// killJitter), so that a worker starts after the vandal's last edit
	// (a broken schema document is repaired by a start).
	vandalStopBefore = killEvery + killJitter + 2*time.Second
	// vandalHuge is how many edits store a huge value (a 1 MB string, a
	// 10,000-element array): the first task edits once the vandal is
	// vandalHugeFor from its end, and none before. Every command of the
	// development server scans the collection, and each such document
	// adds 25-30 ms to every one of them (measured: 6 ms for a scan of
	// 150 small documents, 32 ms with a 1 MB string among them, 60 ms with
	// a 10,000-element array too): made early, they slow the whole run
	// several times over. Documents over vandalCloneMax are not cloned,
	// nor made huge again, for the same reason.
	vandalHuge     = 2
	vandalHugeFor  = 15 * time.Second
	vandalCloneMax = 64 << 10
	// vandalHistoryIDsFor is how long the vandal picks history records
	// from the _ids it read last.
	vandalHistoryIDsFor = 5 * time.Second
	// vandalCheck is the workers' CheckInterval: the default minute would
	// leave documents no claim can match waiting past the end of the run.
	vandalCheck = time.Second
	// vandalDeadline bounds the wait for every task to be final or invalid,
	// from the first publish: 40-70 s were needed in the runs made alone,
	// and 110 s were not enough once in .ci/run, where other packages'
	// tests share the two CPUs; the rest is margin for a slow machine, not
	// an expected time.
	vandalDeadline = 4 * time.Minute
	// vandalRepairDeadline bounds the wait for the metadata documents to
	// be sound again after the vandal stopped: the maintenance lease and
	// the consumers document are repaired within a maintenance interval
	// (1 s) of a worker's next try, the schema document at the next start.
	vandalRepairDeadline = 30 * time.Second
	// apiEvery is the pace of the calls of the readers' API (List, Runs,
	// ListWorkers, the dashboard's pages, the operator command).
	apiEvery = 3 * time.Second

	// staleSlack is added to the soak's lease (2.5 s) and the workers'
	// SweepInterval (1 s) for the age (now - lease_until) past which a
	// holder still on a task on two consecutive polls fails the test. What
	// may keep a lapsed lease on a task beyond a sweep interval:
	//   - with 4 workers and PollBudget 2, each sweeps every 2 s, jittered
	//     by ±20%: up to 2.4 s between sweeps of the collection, not 1 s;
	//   - a lease whose next_expiry the vandal removed or broke is found by
	//     the check of the maintenance lease holder instead (every 1 s
	//     ±20%), and that holder may have just been killed: its lease
	//     holds 3 s, and the next try at it comes within 1.2 s;
	//   - the development server runs one command at a time: under this
	//     load (4 workers, the vandal, the readers) a command waits in its
	//     queue up to about 1.5 s.
	// 2.4 + 1.2 + 3 + 1.2 + 1.5 = 9.3 s. Measured over the seeds run: the
	// longest a lapsed lease was seen held is 0.3-3.8 s on untouched tasks
	// on a quiet machine, 7.5-8.7 s with another package's tests beside
	// and the huge documents in, and 8.4 s on a task whose next_expiry the
	// vandal broke while the maintenance lease changed hands (reported at
	// the end as "lapsed holders"). CI runs other packages' tests beside
	// this one on its two CPUs, which may make the server's queue twice as
	// long: 15 s. A holder that no sweep, check or run end can free stays
	// for ever, far past any bound.
	staleSlack = 15 * time.Second
	// staleRoundTrips is the slack in round trips of the server, when that
	// is more than staleSlack: on a machine busier still, every command
	// waits longer in the server's queue, and a lapsed lease is freed
	// later, not never. A sweep that just missed the lapse ends, the next
	// is due a sweep interval later, and it takes a read, its writes (one
	// command per statement through the splitting proxy) and the history
	// records: about 15 round trips from the lapse to the freed slot. The
	// round trip is the slowest of the test's own reads of the collection
	// in the last staleWindow (a scan, as every command of the development
	// server is).
	staleRoundTrips = 15
	staleWindow     = time.Minute
	// errorLinesPerMinute bounds the WARN and ERROR lines the workers log
	// together in any minute of the run. Measured: TestSoak logs about 30
	// in a minute (a WARN per failed handler call, a few failed pings);
	// the vandal soak 33-71 over the seeds run (a WARN per task set
	// invalid or repaired, per metadata document replaced, per worker
	// start that found the schema document broken). The vandal's edits
	// could explain about 500 at most: a line or two for each of up to 240
	// edits a minute, and the handlers' failures. A loop that fails on a
	// document over and over logs at its pace, several lines a second per
	// worker: thousands a minute.
	errorLinesPerMinute = 600
)

// vandalMix is two thirds of the short mix, over a shorter window: with
// the vandal's load (its reads and edits, and the documents it makes
// bigger) on top of TestSoak's, the short mix would take the test past
// two minutes.
var vandalMix = mix{quick: 48, slow: 20, retry: 12, fail: 6, conc: 6, distinct: 6, recurring: 4,
	waves: 1, window: 30 * time.Second, deadline: vandalDeadline}

// backingOff says a task waits out the delay its failed runs earned, as its
// document shows (pending, nothing held, failed runs, a run_at to come):
// not stuck. An edit can make every run of a task fail (max_retries
// removed from one that succeeds only on its retry); its 20 failed runs,
// each delaying the next up to RetryDelayMax, then outlast the soak.
func backingOff(d liveTask, now time.Time) bool {
	return d.Status == "pending" && len(d.Holders) == 0 && !d.HoldersOther && d.Running == 0 && d.FailedRuns > 0 && d.RunAt.After(now)
}

// finalOrInvalid are the statuses a task may end in under the vandal.
var finalOrInvalid = []string{"succeeded", "failed", "finished", "cancelled", "invalid"}

func TestVandalSoak(t *testing.T) {
	m := vandalMix
	build := buildOperatorCommand(t) // while the server and the workers start
	e := setUp(t, m, "vandal", "vandal", fmt.Sprintf("vandal soak: %d tasks, workers' CheckInterval %s", m.total(), vandalCheck),
		workerEnv{sweep: *sweepFlag, check: vandalCheck})
	r := e.newRun(t, m)
	r.noRestart = true // the faults are the kills and the vandal's edits
	r.doneNames = finalOrInvalid
	v := newVandal(e)
	r.done = func(d liveTask) bool {
		return slices.Contains(finalOrInvalid, d.Status) && len(d.Holders) == 0 && (d.Running == 0 || d.Status == "invalid") ||
			v.isTouched(d.Key) && backingOff(d, time.Now())
	}

	t.Cleanup(func() { v.writeLog(t) })
	r.explain = func(d liveTask) string {
		key := d.Key
		if key == "" {
			key = describe(d.ID)
		}
		return fmt.Sprintf(" (the vandal's edits of it: %v)", v.editsOf(key))
	}
	stale := &staleHolders{t: t, v: v, base: soakLease + *sweepFlag, prev: map[string]bool{}, pool: e.pool}
	r.polled = stale.poll
	api := newReaders(t, e, v, build)
	var stopVandal, stopAPI func()
	r.tick = func(now time.Time) {
		switch {
		case stopVandal == nil && !r.firstAt.IsZero():
			stopVandal = v.start(r.firstAt, r.faultEnd.Add(-vandalStopBefore))
			stopAPI = api.start()
		case stopVandal != nil && now.After(r.faultEnd.Add(-vandalStopBefore)):
			stopVandal()
		}
	}
	defer func() { // on a failure of the loop too
		if stopVandal != nil {
			stopVandal()
			stopAPI()
		}
	}()
	r.loop()
	stopVandal()
	touched := v.touchedKeys()
	// Untouched tasks must have their history written; a touched one may
	// keep marks of runs it cannot record (reported below, not failed).
	r.waitHistoryWritten(bson.D{{Key: "_id", Value: bson.D{{Key: "$nin", Value: touched}}}})
	waitMetaRepaired(t, e.coll, v)
	waitWorkersReady(t, e.pool)
	stopAPI()
	e.stopWorkers(t)

	docs := readRawTasks(t, e.coll)
	runs, incarnations := e.handlerRuns(t)
	checkTouched(t, docs, v)
	sum := verifyUntouched(t, e, docs, runs, incarnations, v)
	sum.log(t, r.faults, time.Since(e.began), e.seed, len(e.pool.incarnations()), 0)
	lines := checkErrorLines(t, e.pool, r.firstAt)
	v.report(t, docs)
	stale.report(t)
	api.report(t)
	t.Logf("vandal summary: worker WARN/ERROR lines per minute from the first publish: %v (bound %d)", lines, errorLinesPerMinute)
}

// vandalEdit is one edit the vandal made.
type vandalEdit struct {
	at     time.Duration // since the first publish
	target string        // tasks, history, meta, workers
	id     string        // the document's _id, as stored
	key    string        // the task it touched, "" for meta and workers
	op     string        // the kind of edit, for the summary
	what   string
	err    error
}

func (e vandalEdit) String() string {
	s := fmt.Sprintf("t+%s %s %s: %s", e.at.Round(time.Millisecond), e.target, e.id, e.what)
	if e.key != "" && e.key != e.id {
		s += " (task " + e.key + ")"
	}
	if e.err != nil {
		s += fmt.Sprintf(" [failed: %v]", e.err)
	}
	return s
}

// vandal edits random fields of random documents by hand, as a person in
// mongosh or Compass might, and records what it touched.
type vandal struct {
	rng                    *rand.Rand
	coll, runs, meta, regs *mongo.Collection
	pool                   *workerPool
	specs                  map[string]spec
	logPath                string
	seed                   uint64

	began, until time.Time
	mu           sync.Mutex
	edits        []vandalEdit
	// touched are the task keys touched, with the edits (a clone touches
	// the task it copies: it has its key).
	touched map[string][]int
	clones  map[string]string // clone _id (as described) → the key it copies
	history map[string]bool   // history records edited, by _id as described
	huge    int
	clone   int // clones made, for their _id

	// Read and written by the vandal's goroutine alone.
	taskIDs      []any // every task's _id: the mix's, then the clones'
	historyCache []any
	historyRead  time.Time
	statusDeck   []any // the statuses not set yet in this round of them (see nextStatus)
	statusRounds int   // rounds of taskStatuses begun
}

func newVandal(e *soakEnv) *vandal {
	db := e.coll.Database()
	return &vandal{
		rng:     rand.New(rand.NewPCG(e.seed^0x7a4da1, e.seed)),
		coll:    e.coll,
		runs:    db.Collection(e.coll.Name() + ".runs"),
		meta:    db.Collection(e.coll.Name() + ".meta"),
		regs:    db.Collection(mscheduler.WorkersCollection),
		pool:    e.pool,
		specs:   e.specs,
		logPath: filepath.Join(e.logDir, "vandal.log"),
		seed:    e.seed,
		touched: map[string][]int{},
		taskIDs: func() []any {
			var ids []any
			for _, key := range slices.Sorted(maps.Keys(e.specs)) {
				ids = append(ids, key)
			}
			return ids
		}(),
		clones:  map[string]string{},
		history: map[string]bool{},
	}
}

// start starts the vandal until until; the function it returns stops it
// and waits for its last edit (it may be called more than once).
func (v *vandal) start(began, until time.Time) func() {
	v.began, v.until = began, until
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// Edits are due at the pace from the last one's due time, so that
		// a slow edit (the server is busy) does not slow the pace down.
		due := time.Now().Add(v.pace())
		timer := time.NewTimer(time.Until(due))
		defer timer.Stop()
		for {
			select {
			case <-stop:
				return
			case <-timer.C:
			}
			if time.Now().After(until) {
				return
			}
			v.edit()
			due = due.Add(v.pace())
			timer.Reset(time.Until(due))
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(stop) })
		<-done
	}
}

func (v *vandal) pace() time.Duration {
	return vandalEvery + time.Duration(v.rng.Int64N(int64(vandalJitter)))
}

// describe is an _id as the vandal records it: a string as it is, else
// its extended JSON.
func describe(id bson.RawValue) string {
	if s, ok := id.StringValueOK(); ok {
		return s
	}
	return id.String()
}

func (v *vandal) record(e vandalEdit) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e.at = time.Since(v.began)
	v.edits = append(v.edits, e)
	if e.key != "" {
		v.touched[e.key] = append(v.touched[e.key], len(v.edits)-1)
	}
}

// touchedKeys are the task keys the vandal touched so far.
func (v *vandal) touchedKeys() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Sorted(maps.Keys(v.touched))
}

func (v *vandal) isTouched(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.touched[key]
	return ok
}

// editsOf are the edits that touched the task key.
func (v *vandal) editsOf(key string) []vandalEdit {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []vandalEdit
	for _, i := range v.touched[key] {
		out = append(out, v.edits[i])
	}
	return out
}

// lastEdit is the last edit of a document, "" if none.
func (v *vandal) lastEdit(target, id string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := len(v.edits) - 1; i >= 0; i-- {
		if e := v.edits[i]; e.target == target && e.id == id {
			return e.String()
		}
	}
	return ""
}

// edit makes one edit: of a task most often, else of the history, the
// metadata or the worker registry.
func (v *vandal) edit() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch n := v.rng.IntN(100); {
	case n < 50:
		v.editTask(ctx)
	case n < 65:
		v.editHistory(ctx)
	case n < 85:
		v.editMeta(ctx)
	default:
		v.editWorker(ctx)
	}
}

// pick reads one of the documents of coll with the ids, at random; nil
// when it is not there.
func (v *vandal) pick(ctx context.Context, coll *mongo.Collection, ids []any) (bson.Raw, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: ids[v.rng.IntN(len(ids))]}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	return raw, err
}

// historyIDs are the _ids of the history records, read again when the
// last read is older than vandalHistoryIDsFor.
func (v *vandal) historyIDs(ctx context.Context) ([]any, error) {
	if time.Since(v.historyRead) < vandalHistoryIDsFor {
		return v.historyCache, nil
	}
	cur, err := v.runs.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, err
	}
	v.historyCache = v.historyCache[:0]
	for _, raw := range raws {
		v.historyCache = append(v.historyCache, raw.Lookup("_id"))
	}
	v.historyRead = time.Now()
	return v.historyCache, nil
}

// fields are the fields of doc the vandal may edit: all but _id and
// paused (a legitimate state, not a broken one).
func fields(doc bson.Raw) []string {
	elems, _ := doc.Elements()
	var out []string
	for _, e := range elems {
		if k := e.Key(); k != "_id" && k != "paused" {
			out = append(out, k)
		}
	}
	return out
}

// wrongType is a value of another type than v's, and how it reads.
func (v *vandal) wrongType(val bson.RawValue) any {
	switch val.Type {
	case bson.TypeInt32, bson.TypeInt64:
		return fmt.Sprint(val.AsInt64()) // "3" for 3
	case bson.TypeDouble:
		return fmt.Sprint(val.Double())
	case bson.TypeString:
		return int32(7)
	case bson.TypeDateTime:
		return val.Time().UTC().Format(time.RFC3339)
	case bson.TypeBoolean:
		return "true"
	case bson.TypeArray, bson.TypeEmbeddedDocument:
		return []any{"x", int32(7)}[v.rng.IntN(2)]
	default:
		return int32(1)
	}
}

// shapeFor is an array or a document where a scalar goes, and a string
// where an array or document goes.
func (v *vandal) shapeFor(val bson.RawValue) any {
	switch val.Type {
	case bson.TypeArray, bson.TypeEmbeddedDocument:
		return "x"
	}
	if v.rng.IntN(2) == 0 {
		return bson.A{int32(1), int32(2)}
	}
	return bson.D{{Key: "x", Value: int32(1)}}
}

func show(val any) string {
	switch x := val.(type) {
	case string:
		if len(x) > 40 {
			return fmt.Sprintf("a %d-byte string", len(x))
		}
		return fmt.Sprintf("%q", x)
	case bson.A:
		if len(x) > 10 {
			return fmt.Sprintf("a %d-element array", len(x))
		}
	}
	data, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: val}}, false, false)
	if err != nil {
		return fmt.Sprint(val)
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(data), `{"v":`), "}")
}

func rawShow(val bson.RawValue) string {
	if val.Type == 0 {
		return "missing"
	}
	s := val.String()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// taskStatuses are the values the vandal sets status to: every real one,
// and garbage (nil removes the field).
var taskStatuses = []any{"pending", "running", "succeeded", "failed", "finished", "cancelled", "invalid", "done", "", int32(0), nil}

// vandalStatusesBy is how long before its end the vandal sets status in
// every task edit until it has set each of taskStatuses once: every value
// is tried in every run (about 13 task edits come in that time).
const vandalStatusesBy = 10 * time.Second

// same says a stored value is the value v (nil: missing).
func same(stored bson.RawValue, v any) bool {
	if v == nil {
		return stored.Type == 0
	}
	typ, data, err := bson.MarshalValue(v)
	return err == nil && stored.Type == typ && bytes.Equal(stored.Value, data)
}

// nextStatus deals the statuses from a shuffled deck of taskStatuses, so
// that each is set once before any is set again.
func (v *vandal) nextStatus() any {
	if len(v.statusDeck) == 0 {
		v.statusDeck = slices.Clone(taskStatuses)
		v.rng.Shuffle(len(v.statusDeck), func(i, j int) { v.statusDeck[i], v.statusDeck[j] = v.statusDeck[j], v.statusDeck[i] })
		v.statusRounds++
	}
	s := v.statusDeck[0]
	v.statusDeck = v.statusDeck[1:]
	return s
}

// editTask edits a random task document (or clone): its status, a field's
// type or shape, a field removed, a huge value, or a clone inserted.
func (v *vandal) editTask(ctx context.Context) {
	doc, err := v.pick(ctx, v.coll, v.taskIDs)
	if doc == nil {
		if err != nil {
			v.record(vandalEdit{target: "tasks", op: "pick", what: "read a task", err: err})
		}
		return
	}
	rawID := doc.Lookup("_id")
	id := describe(rawID)
	key := id
	v.mu.Lock()
	if orig, ok := v.clones[id]; ok {
		key = orig
	}
	v.mu.Unlock()
	if _, ok := rawID.StringValueOK(); !ok && key == id {
		key = "" // not the vandal's: reported at the end
	}
	e := vandalEdit{target: "tasks", id: id, key: key}
	set := func(field string, val any) {
		e.what = fmt.Sprintf("set %s: %s (was %s)", field, show(val), rawShow(doc.Lookup(field)))
		_, e.err = v.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: val}}}})
	}
	unset := func(field string) {
		e.what = fmt.Sprintf("remove %s (was %s)", field, rawShow(doc.Lookup(field)))
		_, e.err = v.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}})
	}
	fs := fields(doc)
	field := fs[v.rng.IntN(len(fs))]
	n, huge := v.rng.IntN(88), 0
	v.mu.Lock()
	if v.huge < vandalHuge && time.Until(v.until) < vandalHugeFor && len(doc) < vandalCloneMax {
		v.huge++
		n, huge = 88, v.huge // the first task edits of the window
	}
	v.mu.Unlock()
	if n >= 74 && n < 88 && len(doc) > vandalCloneMax {
		n = 0 // its status instead
	}
	if huge == 0 && time.Until(v.until) < vandalStatusesBy && (v.statusRounds == 0 || v.statusRounds == 1 && len(v.statusDeck) > 0) {
		n = 0 // the statuses not tried yet
	}
	switch {
	case n < 20:
		e.op = "status"
		s := v.nextStatus()
		if same(doc.Lookup("status"), s) && len(v.statusDeck) > 0 {
			// No change: deal the next one, and this one again later.
			v.statusDeck = append(v.statusDeck, s)
			s = v.nextStatus()
		}
		if s == nil {
			unset("status")
		} else {
			set("status", s)
		}
	case n < 45:
		e.op = "wrong type"
		set(field, v.wrongType(doc.Lookup(field)))
	case n < 58:
		e.op = "shape"
		set(field, v.shapeFor(doc.Lookup(field)))
	case n < 70:
		e.op = "remove"
		unset(field)
	case n < 74:
		e.op = "group"
		set("group", bson.A{bson.D{{Key: "x", Value: int32(1)}}})
	case n < 88:
		e.op = "clone"
		v.cloneTask(ctx, doc, &e)
	case huge == 1:
		e.op = "huge"
		set([]string{"description", field}[v.rng.IntN(2)], strings.Repeat("v", 1<<20))
	default:
		e.op = "huge"
		big := make(bson.A, 10_000)
		for i := range big {
			big[i] = int32(i)
		}
		set([]string{"tags", field}[v.rng.IntN(2)], big)
	}
	v.record(e)
}

// cloneTask inserts a copy of doc: without _id (the server gives it an
// ObjectId, as Compass's clone does), or with a new string _id and the
// old key field.
func (v *vandal) cloneTask(ctx context.Context, doc bson.Raw, e *vandalEdit) {
	elems, err := doc.Elements()
	if err != nil {
		e.err = err
		return
	}
	var copied bson.D
	for _, el := range elems {
		if el.Key() != "_id" {
			copied = append(copied, bson.E{Key: el.Key(), Value: el.Value()})
		}
	}
	v.mu.Lock()
	v.clone++
	n := v.clone
	v.mu.Unlock()
	byObjectID := v.rng.IntN(2) == 0
	if !byObjectID {
		copied = append(bson.D{{Key: "_id", Value: fmt.Sprintf("clone-%d-%s", n, e.key)}}, copied...)
	}
	res, err := v.coll.InsertOne(ctx, copied)
	if err != nil {
		e.err = err
		e.what = "clone it"
		return
	}
	v.taskIDs = append(v.taskIDs, res.InsertedID)
	cloneID := fmt.Sprint(res.InsertedID)
	if oid, ok := res.InsertedID.(bson.ObjectID); ok {
		cloneID = bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]}.String()
		e.what = "clone it without _id: " + cloneID
	} else {
		e.what = "clone it as " + cloneID + ", with its key field"
	}
	v.mu.Lock()
	v.clones[cloneID] = e.key
	v.mu.Unlock()
}

// editHistory gives a field of a random history record the wrong type, or
// removes it; it touches the record's task.
func (v *vandal) editHistory(ctx context.Context) {
	ids, err := v.historyIDs(ctx)
	var doc bson.Raw
	if err == nil {
		doc, err = v.pick(ctx, v.runs, ids)
	}
	if doc == nil {
		if err != nil {
			v.record(vandalEdit{target: "history", op: "pick", what: "read a history record", err: err})
		}
		return
	}
	rawID := doc.Lookup("_id")
	e := vandalEdit{target: "history", id: describe(rawID)}
	e.key, _ = doc.Lookup("key").StringValueOK()
	fs := fields(doc)
	field := fs[v.rng.IntN(len(fs))]
	if v.rng.IntN(2) == 0 {
		e.op = "wrong type"
		val := v.wrongType(doc.Lookup(field))
		e.what = fmt.Sprintf("set %s: %s (was %s)", field, show(val), rawShow(doc.Lookup(field)))
		_, e.err = v.runs.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: val}}}})
	} else {
		e.op = "remove"
		e.what = fmt.Sprintf("remove %s (was %s)", field, rawShow(doc.Lookup(field)))
		_, e.err = v.runs.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}})
	}
	v.mu.Lock()
	v.history[e.id] = true
	v.mu.Unlock()
	v.record(e)
}

// editMeta breaks one of the collection's metadata documents.
func (v *vandal) editMeta(ctx context.Context) {
	e := vandalEdit{target: "meta"}
	byID := func(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }
	switch v.rng.IntN(5) {
	case 0:
		e.id, e.op, e.what = "maintenance", "lease", `set lease_until: "2020-01-01T00:00:00Z"`
		_, e.err = v.meta.UpdateOne(ctx, byID(e.id), bson.D{{Key: "$set", Value: bson.D{{Key: "lease_until", Value: "2020-01-01T00:00:00Z"}}}})
	case 1:
		e.id, e.op, e.what = "maintenance", "lease", "remove lease_until"
		_, e.err = v.meta.UpdateOne(ctx, byID(e.id), bson.D{{Key: "$unset", Value: bson.D{{Key: "lease_until", Value: ""}}}})
	case 2:
		e.id, e.op, e.what = "maintenance", "lease", "replace its content by {junk: 1}"
		_, e.err = v.meta.ReplaceOne(ctx, byID(e.id), bson.D{{Key: "junk", Value: int32(1)}})
	case 3:
		e.id, e.op, e.what = "schema", "schema", `set version: "2"`
		_, e.err = v.meta.UpdateOne(ctx, byID(e.id), bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: "2"}}}})
	default:
		e.id, e.op, e.what = "consumers", "consumers", `set seen: "x"`
		_, e.err = v.meta.UpdateOne(ctx, byID(e.id), bson.D{{Key: "$set", Value: bson.D{{Key: "seen", Value: "x"}}}})
	}
	v.record(e)
}

// editWorker breaks the registry document of one of the soak's workers.
func (v *vandal) editWorker(ctx context.Context) {
	var ids []any
	for _, p := range v.pool.incarnations() {
		ids = append(ids, p.id)
	}
	doc, err := v.pick(ctx, v.regs, ids)
	if doc == nil {
		if err != nil {
			v.record(vandalEdit{target: "workers", op: "pick", what: "read a worker", err: err})
		}
		return
	}
	rawID := doc.Lookup("_id")
	e := vandalEdit{target: "workers", id: describe(rawID)}
	set := func(field string, val any) {
		e.what = fmt.Sprintf("set %s: %s (was %s)", field, show(val), rawShow(doc.Lookup(field)))
		_, e.err = v.regs.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: val}}}})
	}
	fs := fields(doc)
	field := fs[v.rng.IntN(len(fs))]
	switch v.rng.IntN(3) {
	case 0:
		e.op = "heartbeat"
		set("heartbeat_ms", []any{int64(1e18), float64(1e18)}[v.rng.IntN(2)])
	case 1:
		e.op = "wrong type"
		set(field, v.wrongType(doc.Lookup(field)))
	default:
		e.op = "remove"
		e.what = fmt.Sprintf("remove %s (was %s)", field, rawShow(doc.Lookup(field)))
		_, e.err = v.regs.UpdateOne(ctx, bson.D{{Key: "_id", Value: rawID}}, bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}})
	}
	v.record(e)
}

// writeLog writes every edit to the vandal's log, and to the test's log
// when the test failed (its directory may be a temporary one).
func (v *vandal) writeLog(t *testing.T) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var log bytes.Buffer
	for _, e := range v.edits {
		fmt.Fprintln(&log, e)
	}
	if err := os.WriteFile(v.logPath, log.Bytes(), 0o644); err != nil {
		t.Errorf("write the vandal's log: %v", err)
	}
	if t.Failed() {
		t.Logf("the vandal's %d edits (seed %d):\n%s", len(v.edits), v.seed, log.String())
	}
}

// report logs a summary of the edits and how the touched tasks ended.
func (v *vandal) report(t *testing.T, docs map[string]bson.Raw) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	byOp, failed := statuses{}, 0
	for _, e := range v.edits {
		byOp[e.target+" "+e.op]++
		if e.err != nil {
			failed++
		}
	}
	ends := statuses{}
	var marks []string // touched tasks still marking runs whose history record is not written
	for id, doc := range docs {
		key := id
		if orig, ok := v.clones[id]; ok {
			key = orig
		}
		if _, ok := v.touched[key]; !ok {
			continue
		}
		d := readLive(doc)
		if d.Unlogged > 0 {
			marks = append(marks, id)
		}
		end := d.Status
		if d.Status == "invalid" {
			end += " on " + cond(d.InvalidField != "", d.InvalidField, "(no field)")
		}
		ends[end]++
	}
	t.Logf("vandal summary: %d edits (%d returned an error), by kind: %v", len(v.edits), failed, byOp)
	tried := 0 // status values set
	switch v.statusRounds {
	case 0:
	case 1:
		tried = len(taskStatuses) - len(v.statusDeck)
	default:
		tried = len(taskStatuses)
	}
	t.Logf("vandal summary: %d of %d tasks touched, %d clones, %d history records edited, %d huge values, %d of the %d status values set; every edit is in %s",
		len(v.touched), len(v.specs), len(v.clones), len(v.history), v.huge, tried, len(taskStatuses), v.logPath)
	t.Logf("vandal summary: touched tasks and clones ended: %v", ends)
	if len(marks) > 0 {
		slices.Sort(marks)
		t.Logf("vandal summary: touched tasks that still mark runs whose history record is not written: %v", marks)
	}
}

// staleHolders fails the test when a task keeps a holder whose lease
// lapsed more than its bound ago on two consecutive polls: no sweep, check
// or run end freed it. The bound is base (the lease and the sweep
// interval) and the larger of staleSlack and staleRoundTrips round trips
// of the server as the test's polls see it. The lease is the holder's lease_until as stored: a run
// that has not pinged yet keeps the claim's (its start + 30 s), though the
// task's shorter worker timeout ends it sooner, since a sweep is only
// bound to look at the task by then (its next_expiry is the claimant's
// guess, at most the claim's lease).
type staleHolders struct {
	t    testing.TB
	v    *vandal
	base time.Duration
	pool *workerPool // nil: no digest of the workers' upkeep on a failure

	trips  []polledTrip  // the polls' round trips of the last staleWindow
	widest time.Duration // the largest bound used

	prev             map[string]bool // holders past the bound at the last poll
	reported         int
	maxTouched       time.Duration // the longest a lapsed lease was seen held, on touched tasks
	maxUntouched     time.Duration // and on the others
	worst            string        // the task of maxTouched, and the vandal's edits of it
	polls, lapsedSum int
}

// polledTrip is the round trip of one of the test's polls, and when it
// ended.
type polledTrip struct {
	at   time.Time
	took time.Duration
}

// bound is the age past which a lapsed lease counts as stale at now.
func (s *staleHolders) bound(now time.Time, took time.Duration) time.Duration {
	s.trips = append(s.trips, polledTrip{at: now, took: took})
	for len(s.trips) > 0 && now.Sub(s.trips[0].at) > staleWindow {
		s.trips = s.trips[1:]
	}
	slowest := time.Duration(0)
	for _, tr := range s.trips {
		slowest = max(slowest, tr.took)
	}
	b := s.base + max(staleSlack, staleRoundTrips*slowest)
	s.widest = max(s.widest, b)
	return b
}

func (s *staleHolders) poll(live liveTasks, took time.Duration) {
	now := time.Now()
	bound := s.bound(now, took)
	cur := map[string]bool{}
	s.polls++
	for _, d := range live {
		id := describe(d.ID)
		for w, h := range d.Holders {
			age := now.Sub(h.LeaseUntil)
			if age <= 0 {
				continue
			}
			s.lapsedSum++
			key := d.Key
			if key == "" {
				key = id
			}
			if s.v.isTouched(key) || key != id {
				if age > s.maxTouched {
					s.maxTouched, s.worst = age, fmt.Sprintf("%s, edited: %v", id, s.v.editsOf(key))
				}
			} else {
				s.maxUntouched = max(s.maxUntouched, age)
			}
			if age <= bound {
				continue
			}
			k := id + " " + w + " " + h.Run
			cur[k] = true
			if s.prev[k] && s.reported < maxReports {
				s.reported++
				s.t.Errorf("task %s (status %s): holder %s (run %s) still holds it %s after its lease lapsed, past %s, on two polls in a row; vandal's edits of the task: %v",
					id, d.Status, w, h.Run, age.Round(time.Millisecond), bound.Round(time.Millisecond), s.v.editsOf(key))
				if s.reported == 1 && s.pool != nil {
					s.t.Log(upkeepDigest(s.pool, w, h.LeaseUntil))
				}
			}
		}
	}
	s.prev = cur
}

func (s *staleHolders) report(t *testing.T) {
	t.Helper()
	t.Logf("vandal summary: lapsed holders: longest seen %s on touched tasks%s, %s on the others (bound lease %s + sweep %s + the larger of %s and %d round trips of the test's polls; at most %s; %d lapsed holders seen over %d polls)",
		s.maxTouched.Round(time.Millisecond), cond(s.worst != "", " ("+s.worst+")", ""), s.maxUntouched.Round(time.Millisecond), soakLease, *sweepFlag, staleSlack, staleRoundTrips, s.widest.Round(time.Millisecond), s.lapsedSum, s.polls)
}

// readers call the readers' API while the soak runs, each kind every
// apiEvery on its own (one slow kind does not hold the others back), and
// keep every error: Producer.List (all pages), Producer.Runs (all pages)
// and ListWorkers; the dashboard's pages for the collection; and, when it
// was built, the operator command's list, history and workers.
type readers struct {
	e        *soakEnv
	v        *vandal
	producer *mscheduler.Producer[params]
	dash     *httptest.Server
	cmd      *operatorBuild

	mu      sync.Mutex
	calls   statuses
	slowest map[string]time.Duration // the slowest call of each kind
	errors  map[string][]string      // by call: when and what, in order
}

func newReaders(t *testing.T, e *soakEnv, v *vandal, cmd *operatorBuild) *readers {
	d, err := dashboard.New(e.coll.Database(), &dashboard.Config{Collections: []string{e.coll.Name()}, Token: "-",
		QueryTimeout: opTimeout, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return &readers{e: e, v: v, producer: e.producer, dash: srv, cmd: cmd, calls: statuses{}, slowest: map[string]time.Duration{}, errors: map[string][]string{}}
}

// start starts the readers; the function it returns stops them, cutting
// short the calls under way (their errors then do not count), and waits
// for them (it may be called more than once).
func (a *readers) start() func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	every := func(call func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(apiEvery)
			defer tick.Stop()
			for {
				call(ctx)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	every(a.library)
	every(a.dashboard)
	every(a.command)
	var once sync.Once
	return func() {
		once.Do(cancel)
		wg.Wait()
	}
}

// fail records an error, unless the readers were being stopped (stop is
// done).
func (a *readers) fail(stop context.Context, what string, err error) {
	if stop.Err() != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errors[what] = append(a.errors[what], fmt.Sprintf("t+%s: %v", time.Since(a.v.began).Round(time.Millisecond), err))
}

// count counts a call, which began then.
func (a *readers) count(what string, began time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[what]++
	a.slowest[what] = max(a.slowest[what], time.Since(began))
}

// within calls f with a context of its own, bounded by opTimeout.
func within(stop context.Context, f func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(stop, opTimeout)
	defer cancel()
	f(ctx)
}

// library calls List, every page, Runs, every page, and ListWorkers,
// each call within opTimeout.
func (a *readers) library(stop context.Context) {
	// Tasks are never deleted here, and the key order is the order of
	// _id, which never changes: every task there before the first page is
	// listed on one of them.
	var before int64
	var countErr error
	within(stop, func(ctx context.Context) { before, countErr = a.e.coll.CountDocuments(ctx, bson.D{}) })
	after, seen := "", 0
	for page := 0; ; page++ {
		began := time.Now()
		var tasks []mscheduler.TaskInfo[params]
		var err error
		within(stop, func(ctx context.Context) {
			tasks, err = a.producer.List(ctx, mscheduler.ListOpts{Limit: 50, After: after})
		})
		a.count("List", began)
		if err != nil {
			a.fail(stop, fmt.Sprintf("Producer.List page %d (after %q)", page+1, after), err)
			break
		}
		seen += len(tasks)
		if len(tasks) < 50 {
			if countErr == nil && int64(seen) < before {
				a.fail(stop, "Producer.List", fmt.Errorf("its pages listed %d tasks, but the collection held %d before the first page", seen, before))
			}
			break
		}
		next := tasks[len(tasks)-1].Task.Key
		if next <= after || page > 100 {
			a.fail(stop, "Producer.List", fmt.Errorf("page %d does not move on: After %q, then %q (%d tasks listed)", page+1, after, next, seen))
			break
		}
		after = next
	}
	cursor := ""
	for page := 0; ; page++ {
		began := time.Now()
		var runs *mscheduler.RunPage
		var err error
		within(stop, func(ctx context.Context) {
			runs, err = a.producer.Runs(ctx, mscheduler.RunFilter{Limit: 200, After: cursor})
		})
		a.count("Runs", began)
		if err != nil {
			a.fail(stop, fmt.Sprintf("Producer.Runs page %d", page+1), err)
			break
		}
		if runs.Next == "" {
			break
		}
		if runs.Next == cursor || page > 100 {
			a.fail(stop, "Producer.Runs", fmt.Errorf("page %d does not move on", page+1))
			break
		}
		cursor = runs.Next
	}
	began := time.Now()
	within(stop, func(ctx context.Context) {
		if _, err := mscheduler.ListWorkers(ctx, a.e.coll.Database()); err != nil {
			a.fail(stop, "ListWorkers", err)
		}
	})
	a.count("ListWorkers", began)
}

// dashboard requests the dashboard's pages for the collection: the
// overview, the tasks (all, invalid, running), the workers, the
// schedules, and the pages of a task the vandal touched, of a clone with a
// string _id, and of a task it did not; each within opTimeout.
func (a *readers) dashboard(stop context.Context) {
	c := url.QueryEscape(a.e.coll.Name())
	pages := []string{"/", "/tasks?c=" + c, "/tasks?c=" + c + "&status=invalid", "/tasks?c=" + c + "&status=running",
		"/workers", "/schedules?c=" + c}
	task := func(key string) string { return "/task?c=" + c + "&key=" + url.QueryEscape(key) }
	touched := a.v.touchedKeys()
	if len(touched) > 0 {
		pages = append(pages, task(touched[len(touched)/2]))
	}
	a.v.mu.Lock()
	for id := range a.v.clones {
		if strings.HasPrefix(id, "clone-") {
			pages = append(pages, task(id))
			break
		}
	}
	a.v.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(a.e.specs)) {
		if !slices.Contains(touched, key) {
			pages = append(pages, task(key))
			break
		}
	}
	for _, p := range pages {
		within(stop, func(ctx context.Context) { a.get(stop, ctx, p) })
	}
}

func (a *readers) get(stop, ctx context.Context, path string) {
	defer a.count("dashboard", time.Now())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.dash.URL+path, nil)
	if err != nil {
		a.fail(stop, "dashboard "+path, err)
		return
	}
	req.Header.Set("Authorization", "Bearer -")
	resp, err := a.dash.Client().Do(req)
	if err != nil {
		a.fail(stop, "dashboard "+path, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		a.fail(stop, "dashboard "+path, fmt.Errorf("status %d: %.300s", resp.StatusCode, text(body)))
	}
}

// text is the text of an HTML page, roughly: its tags left out.
func text(body []byte) string {
	var b strings.Builder
	in := false
	for _, c := range string(body) {
		switch {
		case c == '<':
			in = true
		case c == '>':
			in = false
			b.WriteByte(' ')
		case !in:
			b.WriteRune(c)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// command runs the operator command's list, history and workers, once it
// is built.
func (a *readers) command(stop context.Context) {
	select {
	case <-a.cmd.done:
	case <-stop.Done():
		return
	}
	if a.cmd.err != nil {
		return // reported at the end
	}
	for _, args := range [][]string{{"list", "--limit", "1000"}, {"history", "--limit", "1000"}, {"workers"}} {
		ctx, cancel := context.WithTimeout(stop, opTimeout)
		what := "mscheduler " + strings.Join(args, " ")
		began := time.Now()
		cmd := exec.CommandContext(ctx, a.cmd.path, append([]string{"--uri", a.e.uri, "--db", soakDatabase, "-c", a.e.coll.Name()}, args...)...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			a.fail(stop, what, fmt.Errorf("%w: %.300s", err, strings.TrimSpace(stderr.String())))
		}
		a.count("operator command", began)
		cancel()
	}
}

func (a *readers) report(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.cmd.done:
		if a.cmd.err != nil {
			t.Errorf("the operator command could not be built, so its list, history and workers were not called: %v", a.cmd.err)
		} else {
			t.Logf("operator command built in %s", a.cmd.took.Round(time.Millisecond))
		}
	default:
		t.Errorf("the operator command was not built by the end of the run: its list, history and workers were not called")
	}
	// Each call that failed, once, with its first and last errors.
	n := 0
	for _, what := range slices.Sorted(maps.Keys(a.errors)) {
		errs := a.errors[what]
		n += len(errs)
		if len(errs) == 1 {
			t.Errorf("readers' API: %s failed once, at %s", what, errs[0])
		} else {
			t.Errorf("readers' API: %s failed %d times, first at %s; last at %s", what, len(errs), errs[0], errs[len(errs)-1])
		}
	}
	var slowest []string
	for _, what := range slices.Sorted(maps.Keys(a.slowest)) {
		slowest = append(slowest, fmt.Sprintf("%s %s", what, a.slowest[what].Round(time.Millisecond)))
	}
	t.Logf("vandal summary: readers' API calls: %v; %d errors; slowest call: %s", a.calls, n, strings.Join(slowest, ", "))
}

// operatorBuild is the operator command being built.
type operatorBuild struct {
	done chan struct{} // closed when the build is over
	path string
	err  error
	took time.Duration
}

// buildOperatorCommand starts building worker/cmd/mscheduler into a
// temporary directory, with the race detector when this test binary has
// it (its packages are then in the build cache already).
func buildOperatorCommand(t *testing.T) *operatorBuild {
	b := &operatorBuild{done: make(chan struct{}), path: filepath.Join(t.TempDir(), "mscheduler")}
	args := []string{"build", "-o", b.path}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	args = append(args, "github.com/mscheduler/mscheduler/worker/cmd/mscheduler")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	go func() {
		defer close(b.done)
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			if goBin, err = exec.LookPath("go"); err != nil {
				b.err = fmt.Errorf("no go command: %w", err)
				return
			}
		}
		began := time.Now()
		if output, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%v\n%s", err, output)
		}
		b.took = time.Since(began)
	}()
	return b
}

// waitMetaRepaired waits until the collection's metadata documents are
// sound again: the maintenance lease with a string holder and a date
// lease_until, the schema document with a whole-number version, the
// consumers document with a document seen.
func waitMetaRepaired(t *testing.T, coll *mongo.Collection, v *vandal) {
	t.Helper()
	meta := coll.Database().Collection(coll.Name() + ".meta")
	deadline := time.Now().Add(vandalRepairDeadline)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		problems := map[string]string{}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		for _, id := range []string{"maintenance", "schema", "consumers"} {
			raw, err := meta.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
			if err != nil {
				problems[id] = err.Error()
				continue
			}
			switch id {
			case "maintenance":
				if _, ok := raw.Lookup("holder").StringValueOK(); !ok {
					problems[id] = "holder is " + rawShow(raw.Lookup("holder"))
				} else if _, ok := raw.Lookup("lease_until").TimeOK(); !ok {
					problems[id] = "lease_until is " + rawShow(raw.Lookup("lease_until"))
				}
			case "schema":
				if _, ok := raw.Lookup("version").AsInt64OK(); !ok {
					problems[id] = "version is " + rawShow(raw.Lookup("version"))
				}
			case "consumers":
				if _, ok := raw.Lookup("seen").DocumentOK(); !ok {
					problems[id] = "seen is " + rawShow(raw.Lookup("seen"))
				}
			}
		}
		cancel()
		if len(problems) == 0 {
			t.Logf("the metadata documents are sound: maintenance lease, schema version, consumers")
			return
		}
		if time.Now().After(deadline) {
			for _, id := range slices.Sorted(maps.Keys(problems)) {
				t.Errorf("metadata document %q still broken %s after the vandal stopped, with workers running and started since: %s; the vandal's last edit of it: %s",
					id, vandalRepairDeadline, problems[id], v.lastEdit("meta", id))
			}
			return
		}
		<-tick.C
	}
}

// waitWorkersReady fails the test unless every slot's current worker is
// ready: one that cannot start is a failure even if it does not exit.
func waitWorkersReady(t *testing.T, pool *workerPool) {
	t.Helper()
	timeout := time.After(readyTimeout)
	for _, p := range pool.current() {
		select {
		case <-p.ready:
		case <-p.exited:
			t.Errorf("worker %s exited before it was ready: %v\n%s", p.id, p.err, p.stderrTail())
		case <-timeout:
			t.Errorf("worker %s not ready within %s\n%s", p.id, readyTimeout, p.stderrTail())
		}
	}
}

// readRawTasks reads every document of the task collection, by _id as
// the vandal describes it.
func readRawTasks(t *testing.T, coll *mongo.Collection) map[string]bson.Raw {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("read tasks: %v", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		t.Fatalf("read tasks: %v", err)
	}
	out := make(map[string]bson.Raw, len(raws))
	for _, raw := range raws {
		out[describe(raw.Lookup("_id"))] = raw
	}
	return out
}

// checkTouched: every task the vandal touched, and every clone, ends in a
// final status or invalid with the field named, or waits out the delay of
// its failed runs (backingOff), and with no run going.
func checkTouched(t testing.TB, docs map[string]bson.Raw, v *vandal) {
	t.Helper()
	const check = "vandal: touched tasks end"
	reported := 0
	fail := func(format string, args ...any) {
		if reported++; reported <= maxReports {
			t.Errorf("%s: %s", check, fmt.Sprintf(format, args...))
		} else if reported == maxReports+1 {
			t.Errorf("%s: more violations left out", check)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		v.mu.Lock()
		key, clone := v.clones[id]
		_, spec := v.specs[id]
		v.mu.Unlock()
		if !clone {
			key = id
		}
		if !clone && !spec {
			fail("document %s is in the collection, but nobody published or cloned it", id)
			continue
		}
		if !v.isTouched(key) {
			continue
		}
		raw := docs[id]
		d := readLive(raw)
		running := raw.Lookup("running")
		var why []string
		switch {
		case d.Status == "invalid" && d.InvalidField == "":
			why = append(why, fmt.Sprintf("it is invalid with no field named (invalid is %s)", rawShow(raw.Lookup("invalid"))))
		case !slices.Contains(finalOrInvalid, d.Status) && !backingOff(d, time.Now()):
			why = append(why, "its status is "+d.Status)
		}
		if len(d.Holders) > 0 {
			why = append(why, fmt.Sprintf("it has holders %v", d.Holders))
		}
		// An invalid task may keep a running count its holders no longer
		// back: they are what is invalid (holders edited into an array).
		if n, ok := running.AsInt64OK(); ok && n != 0 && d.Status != "invalid" {
			why = append(why, fmt.Sprintf("running is %d", n))
		}
		if len(why) > 0 {
			what := "task"
			if clone {
				what = "clone of " + key
			}
			fail("%s %s: %s; the vandal's edits of it: %v", what, id, strings.Join(why, "; "), v.editsOf(key))
		}
	}
	// The clones the vandal made are all there: it deletes nothing.
	v.mu.Lock()
	defer v.mu.Unlock()
	for id := range v.clones {
		if docs[id] == nil {
			fail("clone %s is gone", id)
		}
	}
}

// verifyUntouched runs TestSoak's checks on the tasks the vandal never
// touched: their documents, their runs in the handler logs, and their
// records in the history (but those the vandal edited).
func verifyUntouched(t *testing.T, e *soakEnv, docs map[string]bson.Raw, runs map[string]*logRun, workers map[string]bool, v *vandal) summary {
	t.Helper()
	specs := map[string]spec{}
	tasks := map[string]*storedTask{}
	for key, s := range e.specs {
		if v.isTouched(key) {
			continue
		}
		specs[key] = s
		raw := docs[key]
		if raw == nil {
			continue // check 1 reports it
		}
		var d storedTask
		if err := bson.Unmarshal(raw, &d); err != nil {
			t.Errorf("untouched task %s does not decode: %v", key, err)
			continue
		}
		tasks[key] = &d
	}
	own := map[string]*logRun{}
	for id, r := range runs {
		if _, ok := specs[r.key]; ok {
			own[id] = r
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := e.coll.Database().Collection(e.coll.Name()+".runs").Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("read run history: %v", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		t.Fatalf("read run history: %v", err)
	}
	var history []histcheck.HistoryRecord
	v.mu.Lock()
	for _, raw := range raws {
		if v.history[describe(raw.Lookup("_id"))] {
			continue
		}
		var h histcheck.HistoryRecord
		h.Key, _ = raw.Lookup("key").StringValueOK()
		h.RunID, _ = raw.Lookup("run_id").StringValueOK()
		h.Outcome, _ = raw.Lookup("outcome").StringValueOK()
		if _, ok := specs[h.Key]; ok {
			history = append(history, h)
		}
	}
	v.mu.Unlock()
	t.Logf("TestSoak's checks on the %d tasks the vandal did not touch (of %d), their %d handler runs and %d history records", len(specs), len(e.specs), len(own), len(history))
	ver := &verifier{t: t, specs: specs, docs: tasks, runs: own, workers: workers, history: history}
	return ver.verify()
}

type logRecord struct {
	Time  time.Time `json:"time"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
}

// logLine reads a line of a worker's log: a JSON line of its logger, or a
// line of the default logger (text: "2006/01/02 15:04:05 LEVEL msg ...",
// local time), which the library uses for a few messages.
func logLine(line []byte) (logRecord, bool) {
	var rec logRecord
	if json.Unmarshal(line, &rec) == nil {
		return rec, true
	}
	f := strings.SplitN(string(line), " ", 4)
	if len(f) < 4 {
		return rec, false
	}
	at, err := time.ParseInLocation("2006/01/02 15:04:05", f[0]+" "+f[1], time.Local)
	if err != nil {
		return rec, false
	}
	rec.Time, rec.Level, rec.Msg = at, f[2], f[3]
	if i := strings.Index(rec.Msg, "="); i > 0 { // the message without its attributes, roughly
		if j := strings.LastIndex(rec.Msg[:i], " "); j > 0 {
			rec.Msg = rec.Msg[:j]
		}
	}
	return rec, true
}

// eachLogLine calls fn with each line of every worker incarnation's log
// (its stderr).
func eachLogLine(t *testing.T, pool *workerPool, fn func(p *workerProc, line []byte)) {
	t.Helper()
	for _, p := range pool.incarnations() {
		f, err := os.Open(p.errPath)
		if err != nil {
			t.Errorf("worker log: %v", err)
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			fn(p, sc.Bytes())
		}
		if err := sc.Err(); err != nil {
			t.Errorf("worker log %s: %v", p.errPath, err)
		}
		_ = f.Close()
	}
}

// checkErrorLines counts the WARN and ERROR lines of every worker's log
// (its stderr, JSON lines) by minute from the first publish, and fails the
// test when a minute holds more than errorLinesPerMinute, or a worker
// reported a data race.
func checkErrorLines(t *testing.T, pool *workerPool, from time.Time) []int {
	t.Helper()
	var perMinute []int
	byMsg := statuses{}
	eachLogLine(t, pool, func(p *workerProc, line []byte) {
		if bytes.Contains(line, []byte("DATA RACE")) {
			t.Errorf("worker %s reported a data race: see %s", p.id, p.errPath)
		}
		rec, ok := logLine(line)
		if !ok || (rec.Level != "WARN" && rec.Level != "ERROR") {
			return
		}
		m := max(int(rec.Time.Sub(from)/time.Minute), 0)
		for len(perMinute) <= m {
			perMinute = append(perMinute, 0)
		}
		perMinute[m]++
		byMsg[rec.Level+" "+rec.Msg]++
	})
	for m, n := range perMinute {
		if n > errorLinesPerMinute {
			t.Errorf("the workers logged %d WARN/ERROR lines in minute %d of the run, more than %d: a loop? by message: %v", n, m+1, errorLinesPerMinute, byMsg)
		}
	}
	t.Logf("vandal summary: worker WARN/ERROR lines by message: %v", byMsg)
	return perMinute
}
