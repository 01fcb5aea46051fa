// Package lease keeps the leases of a worker's runs: it pings each run
// before its lease lapses (several runs of the worker in one command when
// their pings fall together), reads back what each ping learns (the task
// cancelled, the worker no longer allowed, new ping settings), and cancels
// a run's handler when the run was taken away or its lease lapsed
// unrenewed, at the lease's own time.
package lease

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

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// pingParallelism bounds the pings (lone or batched) in flight at once.
const pingParallelism = 8

// Run is a run this worker holds, from its claim until its end is
// written (or given up on): the pinger keeps its lease while the handler
// runs and while its end is being written.
type Run struct {
	Key     string        // the task's key: its _id, a string, for messages
	ID      bson.RawValue // the task's _id as read: every write about the run is fenced on it
	RunID   string
	Started time.Time
	Cancel  context.CancelCauseFunc
	Doc     *stored.Task // the task as claimed; read-only

	// leaseUntil (server UnixNano) is written by the pinger loop and read
	// by the run's goroutine and by Stop.
	leaseUntil atomic.Int64
	// Lost is set by the pinger when the run was taken away; the run's
	// goroutine then writes nothing more about it.
	Lost atomic.Bool
	// Revoked is set by the pinger when the task stopped allowing this
	// worker; the run's goroutine then records the run as revoked.
	Revoked atomic.Bool
	// Attempt is the handler's local attempt, written by the run's
	// goroutine and sent with each ping.
	Attempt atomic.Int32
	// Finished is claimed (CompareAndSwap) by whoever writes the run's end:
	// the run's goroutine, or Stop for an abandoned run. The pinger goes on
	// renewing a finished run until its end is written.
	Finished atomic.Bool
	// Ending says the run's goroutine is writing its end; that goroutine
	// alone reads and writes it.
	Ending bool

	// held is done once the run's lease is gone (lost, or lapsed while its
	// end was being written) or the run left the pinger: writes about the
	// run wait no longer. Made by Add, cancelled by the pinger.
	held     context.Context
	dropHeld context.CancelCauseFunc
	// firstPing is closed once the run's first ping is answered, or the
	// run left the pinger (see FirstPinged). Made by Add.
	firstPing     chan struct{}
	firstPingOnce sync.Once

	// Set before Add, then owned by the pinger loop.
	SoleHolder    bool
	PingInterval  time.Duration
	WorkerTimeout time.Duration // the task's, as last read
	// LeaseFloor is the lease the run's claim gave it when longer than
	// WorkerTimeout (its holder's lease_ms), which its pings renew it by
	// until the worker has a ping's round trip to go by (see RenewLength).
	LeaseFloor time.Duration
	// longestStretch is the longest stretched renewal (see renewedBy):
	// written by the pinger loop, read by the run's goroutine for its end.
	longestStretch atomic.Int64
	nextPing       time.Time // server time
	pinging        bool      // a ping of the run is in flight
	failures       int       // pings failed in a row
	ignored        string    // ping settings last ignored, so each is logged once
}

// Held is done once the run's lease is gone or the run has left the
// pinger; Background before Add.
func (r *Run) Held() context.Context {
	if r.held == nil {
		return context.Background()
	}
	return r.held
}

// renewedBy takes in a renewal of the run's lease to lease, length after
// the ping was sent.
func (r *Run) renewedBy(lease time.Time, length time.Duration) {
	r.SetLease(lease)
	if length > r.WorkerTimeout && int64(length) > r.longestStretch.Load() {
		r.longestStretch.Store(int64(length))
	}
}

// LongestStretch is the longest lease the run was claimed or renewed by
// beyond its task's worker timeout, or 0: for its run record.
func (r *Run) LongestStretch() time.Duration {
	return max(r.LeaseFloor, time.Duration(r.longestStretch.Load()))
}

// FirstPinged is closed once the run's first ping is answered (renewed,
// failed, or found the run taken away), or the run left the pinger or
// lost its lease; before Add, it is closed already.
func (r *Run) FirstPinged() <-chan struct{} {
	if r.firstPing == nil {
		return closedChan
	}
	return r.firstPing
}

func (r *Run) firstPingDone() {
	if r.firstPing != nil {
		r.firstPingOnce.Do(func() { close(r.firstPing) })
	}
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Lease is when the run's lease lapses, as last renewed (server time).
func (r *Run) Lease() time.Time { return time.Unix(0, r.leaseUntil.Load()) }

// SetLease sets the run's lease as claimed or renewed.
func (r *Run) SetLease(t time.Time) { r.leaseUntil.Store(t.UnixNano()) }

// pinger keeps the leases of this worker's runs. Its loop owns every run's
// schedule: it sends each ping from a goroutine of its own, so that a slow
// ping delays no other, and it acts on each run's lease at the lease's own
// time: a run whose lease lapses unrenewed has its handler cancelled then,
// whatever other pings are doing. A ping that matches nothing means the
// run was taken away, and its handler is cancelled.
type Pinger struct {
	coll     *mongo.Collection
	workerID string
	groups   []string
	clock    *serverclock.Clock
	notify   Notify
	causes   Causes
	log      *slog.Logger
	caps     *query.Caps
	batchMax int // the most runs one ping renews

	mu   sync.Mutex      // guards runs: written by run goroutines and the loop, read by Stop
	runs map[string]*Run // by run id
	kick chan struct{}   // buffered 1: a run was added

	results  chan pingReport // from ping goroutines to the loop
	inflight int             // pings in flight; owned by the loop
	sending  sync.WaitGroup  // ping goroutines

	// latency is the average round trip of a ping, and peak the slowest
	// of late, decaying toward the average; owned by the loop.
	latency, peak time.Duration
	// reserveNow is reserve() as of the last ping: written by the loop,
	// read by the run goroutines as they write their ends.
	reserveNow atomic.Int64
	// pressed counts the runs whose lease is within twice a ping's
	// reserve of lapsing: written by the loop at each tick, read by the
	// claim loop, which then lets the pings go first.
	pressed atomic.Int32
	// budget bounds the pings sent again after a failure; observe hears
	// of each ping's round trip. Set by Use before Loop, then read only.
	budget  *retry.Budget
	observe func(time.Duration)
}

// pingReport is what a ping goroutine tells the loop: the renewals of a
// batch as soon as its update matched them all (renewed), then, last,
// each run's result.
type pingReport struct {
	results []pingResult
	renewed bool
}

// pingResult is what one ping learnt, for the loop to apply.
type pingResult struct {
	run   *Run
	sent  time.Time // server time the ping was sent
	took  time.Duration
	lease time.Time // the lease it asked for
	early bool      // the loop took the renewal in already (see renewed)
	reply *pingReply
	err   error
}

// New makes the pinger of a worker's runs of coll. notify hears of each
// renewal and failed ping; causes are what a run's handler context is
// cancelled with.
func New(coll *mongo.Collection, workerID string, groups []string, clock *serverclock.Clock, notify Notify, causes Causes, log *slog.Logger, caps *query.Caps, batchMax int) *Pinger {
	return &Pinger{coll: coll, workerID: workerID, groups: groups, clock: clock, notify: notify, causes: causes, log: log, caps: caps, batchMax: max(batchMax, 1),
		runs: map[string]*Run{}, kick: make(chan struct{}, 1), results: make(chan pingReport)}
}

// Use sets the budget of pings sent again after a failure, and a function
// that hears of each ping's round trip; before Loop.
func (p *Pinger) Use(budget *retry.Budget, observe func(time.Duration)) {
	p.budget, p.observe = budget, observe
}

// Add hands a claimed run to the pinger. The first ping comes at the
// task's ping interval, and before the claim's own lease could lapse. The
// pinger looks at the runs added when kicked (see Kick).
func (p *Pinger) Add(r *Run) {
	r.held, r.dropHeld = context.WithCancelCause(context.Background())
	r.firstPing = make(chan struct{})
	r.nextPing = r.Started.Add(min(r.PingInterval, taskstate.ClaimLease/2))
	p.mu.Lock()
	p.runs[r.RunID] = r
	p.mu.Unlock()
}

// Kick has the pinger look at the runs added: the runs of one claim are
// added, then kicked once, so that their first pings, often due at once on
// a slow server, go in one batch rather than one command (and, on a busy
// client, one new connection) each.
func (p *Pinger) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Remove takes a run from the pinger: its end is written, or given up.
func (p *Pinger) Remove(r *Run) {
	p.mu.Lock()
	delete(p.runs, r.RunID)
	p.mu.Unlock()
	if r.dropHeld != nil {
		r.dropHeld(errLeftPinger)
	}
	r.firstPingDone()
}

var (
	errLeftPinger = errors.New("mscheduler: the run's end is written or given up")
	errLapsed     = errors.New("mscheduler: the run's lease lapsed")
)

// Pressed says some run's lease is near lapsing (within twice the time a
// ping needs): new claims should wait for the pings.
func (p *Pinger) Pressed() bool { return p.pressed.Load() > 0 }

// holds says the pinger still holds r.
func (p *Pinger) holds(r *Run) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[r.RunID] == r
}

// Snapshot is the runs the pinger holds now.
func (p *Pinger) Snapshot() []*Run {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Run, 0, len(p.runs))
	for _, r := range p.runs {
		out = append(out, r)
	}
	return out
}

// Loop keeps the leases until ctx is done.
func (p *Pinger) Loop(ctx context.Context) {
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
		case rep := <-p.results:
			if rep.renewed {
				p.renewed(rep.results)
				continue
			}
			p.inflight--
			for _, res := range rep.results {
				if !res.early {
					res.run.pinging = false
				}
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
func (p *Pinger) tick(ctx context.Context) time.Time {
	now := p.clock.Now()
	due, soon, next, pressed := p.schedule(p.Snapshot(), now)
	p.pressed.Store(pressed)
	if len(due) == 0 {
		return next
	}
	var batch []*Run
	pinged := append(due, soon...)
	most := longestLeaseLeft(pinged, now)
	for _, r := range pinged {
		if behind(r, now, most) && p.inflight < pingParallelism {
			p.send(ctx, []*Run{r}, now)
			continue
		}
		batch = append(batch, r)
	}
	running, ending := splitEnding(batch)
	p.sendBatches(ctx, running, now)
	for _, r := range ending {
		if p.inflight < pingParallelism {
			p.send(ctx, []*Run{r}, now)
		}
	}
	return next
}

// behind says a run's last renewal failed, or it has less than half the
// lease left of the run with most among those pinged now: it is pinged
// alone, for a batch gives up at the earliest lease in it, and this one
// would cut short the pings of the others. Runs short of lease all alike
// (a server answering in a good part of the lease) gain nothing apart and
// are batched. First counted from the interval alone (less than the lease
// less one and a half intervals), every run of a server answering in
// more than one and a half intervals looked behind, and so did runs whose
// ping met one slow round trip on a busy machine: each was pinged alone, a
// command each, just when the server was slow.
func behind(r *Run, now time.Time, most time.Duration) bool {
	return r.failures > 0 || r.Lease().Sub(now) < most/2
}

// longestLeaseLeft is the most lease left among runs at now.
func longestLeaseLeft(runs []*Run, now time.Time) time.Duration {
	var most time.Duration
	for _, r := range runs {
		most = max(most, r.Lease().Sub(now))
	}
	return most
}

// interval is how often a run is pinged: at its PingInterval, or at twice
// the slowest round trip of late if that is longer. A ping every interval
// on a server slower than that was sent as soon as the last came back:
// each run had a ping in flight at all times, the runs never fell in step
// to be batched, and the worker's pings were much of what made the server
// slow. The lease is safe either way: a run is pinged sooner whenever its
// lease would not cover a round trip twice over (see pingAt).
func (p *Pinger) interval(r *Run) time.Duration { return max(r.PingInterval, 2*p.peak) }

// schedule sorts runs into those whose ping is due and those taken along
// with them (due within half their interval), cancels those whose lease
// lapsed, counts those pressed for time, and says when to look again. A
// run whose end is being written is never taken along: it is pinged alone,
// and only once its lease would not cover the write (see pingAt).
func (p *Pinger) schedule(runs []*Run, now time.Time) (due, soon []*Run, next time.Time, pressed int32) {
	next = now.Add(time.Minute) // with no run, only a kick matters
	for _, r := range runs {
		if lapsedAt(r, now) {
			p.lose(r, "lease lapsed before a ping could renew it")
			if r.Finished.Load() {
				// The end of a finished run is still written for a while
				// after its lease lapsed: until a sweep records the run
				// expired, the holder's fenced end lands, and the run is
				// not done again; after it, the end misses and says so.
				// On a server answering in seconds, giving up at the lapse
				// turned a late end into a run done twice. Past the grace,
				// the write gives up.
				if giveUp := r.Lease().Add(lapsedEndGrace(r)); now.Before(giveUp) {
					next = minTime(next, giveUp)
				} else {
					r.dropHeld(errLapsed)
				}
			}
			continue
		}
		next = minTime(next, r.Lease())
		if r.Lease().Sub(now) < 2*p.reserve() {
			pressed++
		}
		at := p.pingAt(r)
		switch {
		case r.pinging:
		case !at.After(now):
			due = append(due, r)
		case p.batchMax > 1 && !r.Finished.Load() && !at.After(now.Add(p.interval(r)/2)):
			soon = append(soon, r)
			next = minTime(next, at)
		default:
			next = minTime(next, at)
		}
	}
	return due, soon, next, pressed
}

// splitEnding parts the runs whose end is being written from the others:
// each is pinged alone, for its statement may miss as its end lands, and
// a batch renews its runs at once (before its read) only when every
// statement matched; runs that all end together land their ends at
// different times, one batch of ends after another.
func splitEnding(runs []*Run) (running, ending []*Run) {
	for _, r := range runs {
		if r.Finished.Load() {
			ending = append(ending, r)
		} else {
			running = append(running, r)
		}
	}
	return running, ending
}

// sendBatches pings runs in batches of at most batchMax, while pings in
// flight leave room (otherwise a result wakes the loop).
func (p *Pinger) sendBatches(ctx context.Context, runs []*Run, now time.Time) {
	for len(runs) > 0 && p.inflight < pingParallelism {
		n := min(len(runs), p.batchMax)
		p.send(ctx, runs[:n], now)
		runs = runs[n:]
	}
}

// pingAt is when a run's next ping is due: at its interval, or earlier
// when the lease left would not cover the ping's round trip as pings take
// now (twice over, and a margin). After a failure, at the backoff's time.
func (p *Pinger) pingAt(r *Run) time.Time {
	if r.failures > 0 {
		return r.nextPing
	}
	atRisk := r.Lease().Add(-p.reserve())
	if r.Finished.Load() {
		// A run whose end is being written is pinged only when its lease
		// would not cover that write any more: each is pinged alone (see
		// splitEnding), and on a slow server its end, queued behind the
		// others' commands, usually lands well within the lease.
		return atRisk
	}
	return minTime(r.nextPing, atRisk)
}

// reserveMargin is the lease a ping is sent with at the least, beyond
// twice the pings' round trip.
const reserveMargin = 100 * time.Millisecond

// reserve is the lease a ping must have left when it is sent: twice the
// slowest round trip of late, and a margin. The average would do on a
// steady server; on a busy one round trips vary threefold from one command
// to the next, and a ping sent with the average's reserve arrives after
// the lease lapsed when it meets a slow one.
func (p *Pinger) reserve() time.Duration { return 2*max(p.latency, p.peak) + reserveMargin }

// RenewLength is the lease a ping renews r by: the task's worker timeout
// wherever that covers two pings at the slowest round trip of late (the
// one renewing it and the next, which goes at once if it must: see
// pingAt) and a margin; otherwise a longer lease, twice that (as a claim's
// stretch is), which its holder records as lease_ms. It is decided at
// every ping from the pings' own round trips, not once at the claim: a
// run claimed at a stretched lease in a burst goes back to its worker
// timeout once pings show the server keeps it, so a worker that dies
// holding it is found out as soon as the task says, where a stretch kept
// for the run's life left its slot held seconds longer; and a run whose
// server grew too slow after its claim is stretched before its pings are
// cut by their deadlines. Until the worker has a ping's round trip to go
// by, the claim's lease stands. Safe for use by several goroutines.
func (p *Pinger) RenewLength(r *Run) time.Duration {
	reserve := time.Duration(p.reserveNow.Load())
	if reserve <= 0 {
		return max(r.WorkerTimeout, r.LeaseFloor)
	}
	need := reserve + renewMargin // 2 × the slowest round trip of late, and 250 ms
	if need < r.WorkerTimeout {
		return r.WorkerTimeout
	}
	return (2*need + stretchStep - 1) / stretchStep * stretchStep
}

// renewMargin, with the reserve's, is the margin RenewLength leaves beyond
// two pings: as much as a claim's stretch leaves beyond a claim and its
// first ping.
const renewMargin = 150 * time.Millisecond

// stretchStep rounds a stretched renewal, so that runs renewed together
// mostly get the same one.
const stretchStep = 100 * time.Millisecond

// Reserve is the lease a write about a run must have left when it is
// sent, for it to land in time as the server answers now (see reserve).
func (p *Pinger) Reserve() time.Duration {
	if d := time.Duration(p.reserveNow.Load()); d > 0 {
		return d
	}
	return reserveMargin
}

// send starts one ping of runs, bounded by the earliest of their leases: a
// ping answered after a lease lapsed is worth nothing for that run, and
// waiting longer on an unreachable server would let its handler outlive
// its lease. The bound is no deadline the driver sees (see retry.Bounded):
// a ping with less lease left than the server's least round trip is still
// sent, and may still land in time.
func (p *Pinger) send(ctx context.Context, runs []*Run, now time.Time) {
	p.inflight++
	items := make([]pingItem, len(runs))
	timeout := time.Duration(math.MaxInt64)
	for i, r := range runs {
		r.pinging = true
		r.nextPing = now.Add(p.interval(r))
		items[i] = newPingItem(r, now, p.RenewLength(r))
		timeout = min(timeout, max(r.Lease().Sub(now), time.Millisecond))
	}
	p.log.Debug("ping", "runs", len(runs), "key", runs[0].Key, "lease_left", timeout.Round(time.Millisecond), "round_trip", p.latency.Round(time.Millisecond))
	p.sending.Go(func() {
		pctx, cancel := retry.Bounded(ctx, timeout, errLapsed)
		defer cancel()
		start := time.Now()
		var results []pingResult
		if len(items) == 1 {
			it := items[0]
			reply, err := p.renew(pctx, it)
			results = []pingResult{{run: it.run, sent: now, lease: it.lease, reply: reply, err: err, took: time.Since(start)}}
		} else {
			results = p.renewBatch(pctx, ctx, items, now, func(renewed []pingResult) {
				select {
				case p.results <- pingReport{results: renewed, renewed: true}:
				case <-ctx.Done():
				}
			})
		}
		select {
		case p.results <- pingReport{results: results}:
		case <-ctx.Done():
		}
	})
}

// apply takes in one ping's outcome.
func (p *Pinger) apply(ctx context.Context, res pingResult) {
	r := res.run
	defer r.firstPingDone()
	switch {
	case r.Lost.Load() || !p.holds(r): // or its end was written meanwhile
	case res.err != nil && res.early:
		// The update renewed the lease; only the read after it failed.
	case res.err != nil:
		if ctx.Err() != nil {
			return
		}
		p.retryLater(r)
		p.log.Warn("ping failed", "key", r.Key, "run_id", r.RunID, "error", res.err, "next_try_in", r.nextPing.Sub(p.clock.Now()).Round(time.Millisecond))
		p.notify.PingFailed(r, res.err)
	case res.reply == nil:
		p.lose(r, "ping matched nothing: the run was taken over")
	default:
		if !res.early {
			// The run's pings go one after the other, so this is the lease
			// the server holds now, even a shorter one than before (its
			// worker timeout edited down): counting on the longer, the
			// worker would keep a run the sweep may free. An early result
			// was taken in by renewed, and a later ping may have landed
			// since.
			p.took(r, res.took)
			r.renewedBy(res.lease, res.lease.Sub(res.sent))
		}
		r.SoleHolder = res.reply.Running == 1
		p.notify.Renewed(r)
		p.applySettings(r, res.reply, res.sent)
		switch {
		case res.reply.Status == stored.StatusCancelled:
			CancelRun(r, p.causes.Cancelled)
		case !res.reply.allows(p.workerID, p.groups):
			p.revoke(r)
		}
	}
}

// renewed takes in the leases a batch's update renewed, before its read
// back: on a slow server the next ping of those runs need not wait for
// it, so that a batch renews as often as a lone ping would.
func (p *Pinger) renewed(results []pingResult) {
	for _, res := range results {
		r := res.run
		r.firstPingDone()
		if r.Lost.Load() {
			continue
		}
		r.pinging = false
		p.took(r, res.took)
		r.renewedBy(res.lease, res.lease.Sub(res.sent))
	}
}

// latencyWeight is the weight of a ping's round trip in their average.
const latencyWeight = 0.25

// took takes in a successful ping's round trip.
func (p *Pinger) took(r *Run, d time.Duration) {
	r.failures = 0
	if p.latency == 0 {
		p.latency = d
	} else {
		p.latency += time.Duration(latencyWeight * float64(d-p.latency))
	}
	if d >= p.peak {
		p.peak = d
	} else {
		p.peak -= time.Duration(latencyWeight * float64(p.peak-max(d, p.latency)))
	}
	p.reserveNow.Store(int64(p.reserve()))
	if p.budget != nil {
		p.budget.Succeeded()
	}
	if p.observe != nil {
		p.observe(d)
	}
}

// pingRetryBase is the first pause before a failed ping is sent again.
const pingRetryBase = 100 * time.Millisecond

// retryLater schedules the ping of a run whose ping failed: after a
// jittered backoff up to its interval, and when the retry budget allows
// (pings that failed together on a struggling server are not all sent
// again at once).
func (p *Pinger) retryLater(r *Run) {
	r.failures++
	r.nextPing = p.clock.Now().Add(retry.Backoff(pingRetryBase, r.PingInterval, r.failures))
	if p.budget == nil {
		return
	}
	if ok, wait := p.budget.Take(); !ok {
		r.nextPing = r.nextPing.Add(wait)
	}
}

// applySettings takes the task's ping interval and worker timeout as the
// ping read them, so that an edit reaches a run going on. A pair that
// would let the lease lapse between two pings (an interval not below the
// timeout, edited by hand) is ignored, once logged, and the run keeps the
// settings it has.
func (p *Pinger) applySettings(r *Run, reply *pingReply, sent time.Time) {
	interval, timeout := stored.FromMS(reply.PingIntervalMS), stored.FromMS(reply.WorkerTimeoutMS)
	if interval == r.PingInterval && timeout == r.WorkerTimeout {
		return
	}
	if interval <= 0 || timeout <= interval {
		seen := fmt.Sprintf("%d/%d", reply.PingIntervalMS, reply.WorkerTimeoutMS)
		if r.ignored != seen {
			r.ignored = seen
			err := fmt.Errorf("mscheduler: task %q: %s %d and %s %d ignored: the interval must be positive and below the timeout, or the lease lapses between pings; keeping %s and %s",
				r.Key, stored.FPingIntervalMS, reply.PingIntervalMS, stored.FWorkerTimeoutMS, reply.WorkerTimeoutMS, r.PingInterval, r.WorkerTimeout)
			p.log.Warn("ping settings ignored", "key", r.Key, "run_id", r.RunID, "error", err)
			p.notify.PingFailed(r, err)
		}
		return
	}
	r.PingInterval, r.WorkerTimeout = interval, timeout
	r.nextPing = sent.Add(interval)
}

// lapsedAt says r's lease has lapsed at now (to the millisecond the
// server stores).
func lapsedAt(r *Run, now time.Time) bool {
	return !now.Add(time.Millisecond).Before(r.Lease())
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
	Status          stored.Status
	Running         int
	PingIntervalMS  int64
	WorkerTimeoutMS int64
	WorkerIDs       []string
	Group           string
}

func decodePingReply(raw bson.Raw) *pingReply {
	var r pingReply
	if v, ok := raw.Lookup(stored.FStatus).StringValueOK(); ok {
		r.Status = stored.Status(v)
	}
	if v, ok := raw.Lookup(stored.FRunning).AsInt64OK(); ok {
		r.Running = int(v)
	}
	r.PingIntervalMS, _ = raw.Lookup(stored.FPingIntervalMS).AsInt64OK()
	r.WorkerTimeoutMS, _ = raw.Lookup(stored.FWorkerTimeoutMS).AsInt64OK()
	_ = raw.Lookup(stored.FWorkerIDs).Unmarshal(&r.WorkerIDs)
	r.Group, _ = raw.Lookup(stored.FGroup).StringValueOK()
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
// Renew renews one run's lease by length from now (server time), at its
// local attempt (see taskstate.Renew).
func (p *Pinger) Renew(ctx context.Context, r *Run, now time.Time, length time.Duration, attempt int) (*pingReply, error) {
	it := newPingItem(r, now, length)
	it.attempt = attempt
	return p.renew(ctx, it)
}

func (p *Pinger) renew(ctx context.Context, it pingItem) (*pingReply, error) {
	r := it.run
	for try := 0; try < renewTries; try++ {
		for _, form := range []bool{it.sole, !it.sole} {
			reply, err := p.renewAs(ctx, it, form)
			if err != nil || reply != nil {
				return reply, err
			}
		}
		held, err := p.held(ctx, r)
		if err != nil || !held {
			return nil, err
		}
	}
	return nil, fmt.Errorf("mscheduler: ping run %s of %q: the task's holders kept changing", r.RunID, r.Key)
}

func (p *Pinger) renewAs(ctx context.Context, it pingItem, sole bool) (*pingReply, error) {
	key, runID := it.run.Key, it.run.RunID
	filter, update := p.renewStatement(it, sole)
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	raw, err := p.caps.FindOneAndUpdate(ctx, p.coll, filter, update, opts, p.pingProjection()).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: ping run %s of %q: %w", runID, key, err)
	}
	return decodePingReply(raw), nil
}

// held reports whether the run still holds its slot.
func (p *Pinger) held(ctx context.Context, r *Run) (bool, error) {
	key, runID := r.Key, r.RunID
	err := p.coll.FindOne(ctx, taskstate.RunFence(r.ID, p.workerID, runID), options.FindOne().SetProjection(bson.D{{Key: stored.FID, Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mscheduler: ping run %s of %q: %w", runID, key, err)
	}
	return true, nil
}

// CancelRun cancels a run whose task was cancelled, with cause; its end is
// recorded as cancelled. Called by the pinger loop and by Producer.Cancel
// through the local registry.
func CancelRun(r *Run, cause error) {
	if !r.Finished.Load() {
		r.Cancel(cause)
	}
}

// revoke cancels a run whose task no longer allows this worker. The run
// keeps its lease (pings go on) until its end is written as revoked, which
// gives its slot to an allowed worker.
func (p *Pinger) revoke(r *Run) {
	if r.Finished.Load() || !r.Revoked.CompareAndSwap(false, true) {
		return
	}
	p.log.Warn("worker no longer allowed by the task; run revoked", "key", r.Key, "run_id", r.RunID)
	r.Cancel(p.causes.Revoked)
}

// lose cancels a run that this worker no longer holds. A run whose end is
// being written is left to that write, which is fenced too and reports a
// lost run itself.
func (p *Pinger) lose(r *Run, why string) {
	r.firstPingDone() // no ping can come in time now
	if r.Finished.Load() || !r.Lost.CompareAndSwap(false, true) {
		return
	}
	p.Remove(r)
	p.log.Warn("lease lost; handler cancelled", "key", r.Key, "run_id", r.RunID, "reason", why)
	err := fmt.Errorf("%w: %s", p.causes.LeaseLost, why)
	r.Cancel(err)
	if r.dropHeld != nil {
		r.dropHeld(err)
	}
}

// Notify hears of what the pinger does, for the consumer's events.
type Notify struct {
	Renewed    func(r *Run)
	PingFailed func(r *Run, err error)
}

// Causes are the causes a run's handler context is cancelled with.
type Causes struct {
	Cancelled, Revoked, LeaseLost error
}

// Len is how many runs the pinger holds.
func (p *Pinger) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.runs)
}

// lapsedEndGrace is how long after its lease lapsed the end of a finished
// run is still tried: one more lease.
func lapsedEndGrace(r *Run) time.Duration {
	if d := max(r.WorkerTimeout, r.LeaseFloor); d > 0 {
		return d
	}
	return time.Minute
}
