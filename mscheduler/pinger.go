package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// pingParallelism bounds the pings (lone or batched) in flight at once.
const pingParallelism = 8

// activeRun is a run this worker holds, from its claim until its end is
// written (or given up on): the pinger keeps its lease while the handler
// runs and while its end is being written.
type activeRun struct {
	key     string        // the task's key: its _id, a string, for messages
	id      bson.RawValue // the task's _id as read: every write about the run is fenced on it
	runID   string
	started time.Time
	cancel  context.CancelCauseFunc
	doc     *taskDoc // the task as claimed; read-only

	// leaseUntil (server UnixNano) is written by the pinger loop and read
	// by the run's goroutine and by Stop.
	leaseUntil atomic.Int64
	// lost is set by the pinger when the run was taken away; the run's
	// goroutine then writes nothing more about it.
	lost atomic.Bool
	// revoked is set by the pinger when the task stopped allowing this
	// worker; the run's goroutine then records the run as revoked.
	revoked atomic.Bool
	// attempt is the handler's local attempt, written by the run's
	// goroutine and sent with each ping.
	attempt atomic.Int32
	// finished is claimed (CompareAndSwap) by whoever writes the run's end:
	// the run's goroutine, or Stop for an abandoned run. The pinger goes on
	// renewing a finished run until its end is written.
	finished atomic.Bool
	// ending says the run's goroutine is writing its end; that goroutine
	// alone reads and writes it.
	ending bool

	// Owned by the pinger loop after add.
	soleHolder    bool
	pingInterval  time.Duration
	workerTimeout time.Duration
	nextPing      time.Time // server time
	pinging       bool      // a ping of the run is in flight
	ignored       string    // ping settings last ignored, so each is logged once
}

func (r *activeRun) lease() time.Time { return time.Unix(0, r.leaseUntil.Load()) }

// pinger keeps the leases of this worker's runs. Its loop owns every run's
// schedule: it sends each ping from a goroutine of its own, so that a slow
// ping delays no other, and it acts on each run's lease at the lease's own
// time: a run whose lease lapses unrenewed has its handler cancelled then,
// whatever other pings are doing. A ping that matches nothing means the
// run was taken away, and its handler is cancelled.
type pinger struct {
	coll     *mongo.Collection
	workerID string
	groups   []string
	clock    *serverClock
	emit     func(Event)
	log      *slog.Logger
	caps     *capabilities
	batchMax int // the most runs one ping renews

	mu   sync.Mutex            // guards runs: written by run goroutines and the loop, read by Stop
	runs map[string]*activeRun // by run id
	kick chan struct{}         // buffered 1: a run was added

	results  chan []pingResult // from ping goroutines to the loop, one per run pinged
	inflight int               // pings in flight; owned by the loop
	sending  sync.WaitGroup    // ping goroutines
}

// pingResult is what one ping learnt, for the loop to apply.
type pingResult struct {
	run   *activeRun
	sent  time.Time // server time the ping was sent
	lease time.Time // the lease it asked for
	reply *pingReply
	err   error
}

func newPinger(coll *mongo.Collection, workerID string, groups []string, clock *serverClock, emit func(Event), log *slog.Logger, caps *capabilities, batchMax int) *pinger {
	return &pinger{coll: coll, workerID: workerID, groups: groups, clock: clock, emit: emit, log: log, caps: caps, batchMax: max(batchMax, 1),
		runs: map[string]*activeRun{}, kick: make(chan struct{}, 1), results: make(chan []pingResult)}
}

// add hands a claimed run to the pinger. The first ping comes at the
// task's ping interval, and before the claim's own lease could lapse.
func (p *pinger) add(r *activeRun) {
	r.nextPing = r.started.Add(min(r.pingInterval, claimLease/2))
	p.mu.Lock()
	p.runs[r.runID] = r
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *pinger) remove(r *activeRun) {
	p.mu.Lock()
	delete(p.runs, r.runID)
	p.mu.Unlock()
}

func (p *pinger) snapshot() []*activeRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*activeRun, 0, len(p.runs))
	for _, r := range p.runs {
		out = append(out, r)
	}
	return out
}

func (p *pinger) loop(ctx context.Context) {
	defer p.sending.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := p.tick(ctx)
		timer.Reset(max(next.Sub(p.clock.Now()), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-timer.C:
		case results := <-p.results:
			p.inflight--
			for _, res := range results {
				res.run.pinging = false
				p.apply(ctx, res)
			}
		}
	}
}

// tick cancels the runs whose lease lapsed, sends the pings that are due,
// and returns when it must look again. When pings are batched, a run whose
// ping is due takes along in its batch the runs whose pings would come
// within half their interval: pinged a little early, they fall in step, so
// that a worker holding many runs renews them all with a few commands per
// interval.
func (p *pinger) tick(ctx context.Context) time.Time {
	now := p.clock.Now()
	next := now.Add(time.Minute) // with no run, only a kick matters
	var due, soon []*activeRun
	for _, r := range p.snapshot() {
		if p.lapsed(r) {
			// A finished run's end write is left to give up by itself.
			p.lose(r, "lease lapsed before a ping could renew it")
			continue
		}
		next = minTime(next, r.lease())
		switch {
		case r.pinging:
		case !r.nextPing.After(now):
			due = append(due, r)
		case p.batchMax > 1 && !r.nextPing.After(now.Add(r.pingInterval/2)):
			soon = append(soon, r)
			next = minTime(next, r.nextPing)
		default:
			next = minTime(next, r.nextPing)
		}
	}
	if len(due) == 0 {
		return next
	}
	// A batch gives up at the earliest lease in it: a run whose last
	// renewal failed (less lease left than a due ping normally finds, by
	// half an interval) is pinged alone, so that it does not cut short the
	// pings of the others.
	var batch []*activeRun
	for _, r := range append(due, soon...) {
		if r.lease().Sub(now) < r.workerTimeout-r.pingInterval*3/2 && p.inflight < pingParallelism {
			p.send(ctx, []*activeRun{r}, now)
			continue
		}
		batch = append(batch, r)
	}
	for len(batch) > 0 && p.inflight < pingParallelism { // otherwise a result wakes the loop
		n := min(len(batch), p.batchMax)
		p.send(ctx, batch[:n], now)
		batch = batch[n:]
	}
	return next
}

// send starts one ping of runs, bounded by the earliest of their leases: a
// ping answered after a lease lapsed is worth nothing for that run, and
// waiting longer on an unreachable server would let its handler outlive
// its lease.
func (p *pinger) send(ctx context.Context, runs []*activeRun, now time.Time) {
	p.inflight++
	items := make([]pingItem, len(runs))
	timeout := time.Duration(math.MaxInt64)
	for i, r := range runs {
		r.pinging = true
		r.nextPing = now.Add(r.pingInterval)
		items[i] = pingItem{run: r, lease: now.Add(r.workerTimeout), attempt: int(r.attempt.Load()), sole: r.soleHolder}
		timeout = min(timeout, max(r.lease().Sub(now), time.Millisecond))
	}
	p.sending.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var results []pingResult
		if len(items) == 1 {
			it := items[0]
			reply, err := p.renew(pctx, it.run, it.lease, it.attempt, it.sole)
			results = []pingResult{{run: it.run, sent: now, lease: it.lease, reply: reply, err: err}}
		} else {
			results = p.renewBatch(pctx, items, now)
		}
		select {
		case p.results <- results:
		case <-ctx.Done():
		}
	})
}

// apply takes in one ping's outcome.
func (p *pinger) apply(ctx context.Context, res pingResult) {
	r := res.run
	switch {
	case r.lost.Load():
	case res.err != nil:
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("ping failed", "key", r.key, "run_id", r.runID, "error", res.err)
		p.emit(Event{Kind: EventError, Key: r.key, RunID: r.runID, Err: res.err})
	case res.reply == nil:
		p.lose(r, "ping matched nothing: the run was taken over")
	default:
		if res.lease.After(r.lease()) {
			r.leaseUntil.Store(res.lease.UnixNano())
		}
		r.soleHolder = res.reply.Running == 1
		p.emit(Event{Kind: EventRenewed, Key: r.key, RunID: r.runID})
		p.applySettings(r, res.reply, res.sent)
		switch {
		case res.reply.Status == StatusCancelled:
			cancelRun(r)
		case !res.reply.allows(p.workerID, p.groups):
			p.revoke(r)
		}
	}
}

// applySettings takes the task's ping interval and worker timeout as the
// ping read them, so that an edit reaches a run going on. A pair that
// would let the lease lapse between two pings (an interval not below the
// timeout, edited by hand) is ignored, once logged, and the run keeps the
// settings it has.
func (p *pinger) applySettings(r *activeRun, reply *pingReply, sent time.Time) {
	interval, timeout := fromMS(reply.PingIntervalMS), fromMS(reply.WorkerTimeoutMS)
	if interval == r.pingInterval && timeout == r.workerTimeout {
		return
	}
	if interval <= 0 || timeout <= interval {
		seen := fmt.Sprintf("%d/%d", reply.PingIntervalMS, reply.WorkerTimeoutMS)
		if r.ignored != seen {
			r.ignored = seen
			err := fmt.Errorf("mscheduler: task %q: %s %d and %s %d ignored: the interval must be positive and below the timeout, or the lease lapses between pings; keeping %s and %s",
				r.key, fPingIntervalMS, reply.PingIntervalMS, fWorkerTimeoutMS, reply.WorkerTimeoutMS, r.pingInterval, r.workerTimeout)
			p.log.Warn("ping settings ignored", "key", r.key, "run_id", r.runID, "error", err)
			p.emit(Event{Kind: EventError, Key: r.key, RunID: r.runID, Err: err})
		}
		return
	}
	r.pingInterval, r.workerTimeout = interval, timeout
	r.nextPing = sent.Add(interval)
}

// lapsed reports whether the run's lease has run out (to the millisecond
// the server clock estimate is read at).
func (p *pinger) lapsed(r *activeRun) bool {
	return !p.clock.Now().Add(time.Millisecond).Before(r.lease())
}

func minTime(first time.Time, rest ...time.Time) time.Time {
	for _, t := range rest {
		if t.Before(first) {
			first = t
		}
	}
	return first
}

// pingReply is what a ping reads back. It is decoded field by field: a
// field edited by hand into the wrong type must not stop the pings of a
// run going on (it is reported when the task is next claimed).
type pingReply struct {
	Status          Status
	Running         int
	PingIntervalMS  int64
	WorkerTimeoutMS int64
	WorkerIDs       []string
	Group           string
}

func decodePingReply(raw bson.Raw) *pingReply {
	var r pingReply
	if v, ok := raw.Lookup(fStatus).StringValueOK(); ok {
		r.Status = Status(v)
	}
	if v, ok := raw.Lookup(fRunning).AsInt64OK(); ok {
		r.Running = int(v)
	}
	r.PingIntervalMS, _ = raw.Lookup(fPingIntervalMS).AsInt64OK()
	r.WorkerTimeoutMS, _ = raw.Lookup(fWorkerTimeoutMS).AsInt64OK()
	_ = raw.Lookup(fWorkerIDs).Unmarshal(&r.WorkerIDs)
	r.Group, _ = raw.Lookup(fGroup).StringValueOK()
	return &r
}

// allows reports whether the task, as the ping read it, still lets this
// worker run it: an operator may have changed worker_ids or group.
func (r *pingReply) allows(workerID string, groups []string) bool {
	return (len(r.WorkerIDs) == 0 || slices.Contains(r.WorkerIDs, workerID)) &&
		(r.Group == "" || slices.Contains(groups, r.Group))
}

// renewTries bounds how often a ping reads again after both of its forms
// missed while the run still held its slot.
const renewTries = 3

// renew renews one run's lease. The only holder of a task also sets
// next_expiry, exactly; with several holders it stays a lower bound (the
// ping only lowers it, should a claim have guessed a later one), which
// sweeps raise. Which case holds is guessed from
// the last reply and the other form is tried if the guess was wrong, so a
// ping is one command except when the number of holders crosses one. If
// both miss, the number of holders moved between them, or the run was
// taken away: a read of the fence tells which.
func (p *pinger) renew(ctx context.Context, r *activeRun, lease time.Time, attempt int, sole bool) (*pingReply, error) {
	for try := 0; try < renewTries; try++ {
		for _, form := range []bool{sole, !sole} {
			reply, err := p.renewAs(ctx, r, lease, attempt, form)
			if err != nil || reply != nil {
				return reply, err
			}
		}
		held, err := p.held(ctx, r)
		if err != nil || !held {
			return nil, err
		}
	}
	return nil, fmt.Errorf("mscheduler: ping run %s of %q: the task's holders kept changing", r.runID, r.key)
}

func (p *pinger) renewAs(ctx context.Context, r *activeRun, lease time.Time, attempt int, sole bool) (*pingReply, error) {
	key, runID := r.key, r.runID
	filter, update := p.renewStatement(r.id, runID, lease, attempt, sole)
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	raw, err := p.caps.findOneAndUpdate(ctx, p.coll, filter, update, opts, p.pingProjection()).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: ping run %s of %q: %w", runID, key, err)
	}
	return decodePingReply(raw), nil
}

// held reports whether the run still holds its slot.
func (p *pinger) held(ctx context.Context, r *activeRun) (bool, error) {
	key, runID := r.key, r.runID
	err := p.coll.FindOne(ctx, taskstate.RunFence(r.id, p.workerID, runID), options.FindOne().SetProjection(bson.D{{Key: fID, Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mscheduler: ping run %s of %q: %w", runID, key, err)
	}
	return true, nil
}

// cancelRun cancels a run whose task was cancelled; its end is recorded
// as cancelled. Called by the pinger loop and by Producer.Cancel through
// the local registry.
func cancelRun(r *activeRun) {
	if !r.finished.Load() {
		r.cancel(ErrCancelled)
	}
}

// revoke cancels a run whose task no longer allows this worker. The run
// keeps its lease (pings go on) until its end is written as revoked, which
// gives its slot to an allowed worker.
func (p *pinger) revoke(r *activeRun) {
	if r.finished.Load() || !r.revoked.CompareAndSwap(false, true) {
		return
	}
	p.log.Warn("worker no longer allowed by the task; run revoked", "key", r.key, "run_id", r.runID)
	r.cancel(ErrRevoked)
}

// lose cancels a run that this worker no longer holds. A run whose end is
// being written is left to that write, which is fenced too and reports a
// lost run itself.
func (p *pinger) lose(r *activeRun, why string) {
	if r.finished.Load() || !r.lost.CompareAndSwap(false, true) {
		return
	}
	p.remove(r)
	p.log.Warn("lease lost; handler cancelled", "key", r.key, "run_id", r.runID, "reason", why)
	r.cancel(fmt.Errorf("%w: %s", ErrLeaseLost, why))
}
