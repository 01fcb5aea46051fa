package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// pool serves one executor in one collection, for one set of groups, with
// a pulling consumer of its own whose worker id is the executor's: the
// executor is a worker. Its runs are held in the task documents under the
// executor's name, a task of concurrency C runs on C executors at once,
// and DistinctWorkers, worker_ids and groups name executors as they name
// Go workers. The consumer claims only for its executor's waiting takes.
type pool struct {
	g        *Gateway
	coll     string
	executor string
	consumer *mscheduler.Consumer[bson.RawValue, bson.RawValue]
	ready    chan *parked // claimed runs waiting for a taker; cap Capacity

	mu      sync.Mutex // guards what follows
	closing bool       // the pool is being stopped (see reapIdlePools): it takes no more
	waiting int        // runs the waiting takes still want
	taken   int        // runs with an executor
	// failedLast are the runs whose last attempt failed, by run id, until
	// their next attempt is parked or the run ends (see untake).
	failedLast map[string]failedAttempt
	// arriving are the runs claimed and not parked yet, by run id: on
	// their way to the ready queue (see another). arrived is closed, and
	// replaced, each time one leaves it.
	arriving map[string]bool
	arrived  chan struct{}
}

// demand is what the consumer should hold: the runs executors have, and
// those the waiting takes want (see ConsumerConfig.ClaimDemand).
func (p *pool) demand() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.taken + p.waiting + p.retrying()
}

// close marks the pool as being stopped, unless a take waits on it or it
// holds runs, or runs are on their way to it; it says whether it did.
// The caller holds g.mu.
func (p *pool) close() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting > 0 || p.taken > 0 || len(p.arriving) > 0 || len(p.failedLast) > 0 || len(p.ready) > 0 {
		return false
	}
	p.closing = true
	return true
}

// retrying counts the runs held through a retry delay for a taker (see
// untake). The caller holds p.mu.
func (p *pool) retrying() int {
	n := 0
	for _, f := range p.failedLast {
		if f.retried {
			n++
		}
	}
	return n
}

func poolKey(coll string, ex Executor) string {
	return coll + "\x00" + strings.Join(sortedCopy(ex.Groups), ",") + "\x00" + ex.ID
}

// poolEntry is a pool being started, or started: callers of the same key
// wait on done, without holding the gateway's lock through the start's
// round trips.
type poolEntry struct {
	done chan struct{} // closed once p or err is set
	p    *pool
	err  *apiError
}

// poolStartTimeout bounds a pool's start: its consumer's first commands.
const poolStartTimeout = 30 * time.Second

// poolOf returns the pool of an executor in a collection, for its groups,
// started on first use.
func (g *Gateway) poolOf(ctx context.Context, coll string, ex Executor) (*pool, *apiError) {
	if _, err := g.producer(ctx, coll); err != nil {
		return nil, err
	}
	key := poolKey(coll, ex)
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return nil, &apiError{503, "gateway", "the gateway is stopping", nil}
	}
	e, started := g.pools[key]
	if !started && len(g.pools) >= g.cfg.MaxPools {
		g.mu.Unlock()
		return nil, &apiError{http.StatusTooManyRequests, "executor", fmt.Sprintf("the gateway runs %d consumers already, one per executor, collection and set of groups (MaxPools): take again once an executor has gone (a minute or so after its last call)", g.cfg.MaxPools), nil}
	}
	if !started {
		e = &poolEntry{done: make(chan struct{})}
		g.pools[key] = e
	}
	g.mu.Unlock()
	if !started {
		e.p, e.err = g.startPool(ctx, coll, ex)
		if e.err != nil {
			g.mu.Lock()
			delete(g.pools, key) // the next take tries again
			g.mu.Unlock()
		}
		close(e.done)
	}
	// A pool already started is served whatever ctx: a take that its
	// server's shutdown ended answers with no run, not an error, and a
	// select on both would pick either at random.
	select {
	case <-e.done:
		return e.p, e.err
	default:
	}
	select {
	case <-e.done:
		return e.p, e.err
	case <-ctx.Done():
		return nil, &apiError{503, "", "the request ended while the gateway started serving its collection", nil}
	}
}

// startPool starts the pulling consumer of a pool.
func (g *Gateway) startPool(ctx context.Context, coll string, ex Executor) (*pool, *apiError) {
	p := &pool{g: g, coll: coll, executor: ex.ID, ready: make(chan *parked, g.cfg.Capacity), failedLast: map[string]failedAttempt{},
		arriving: map[string]bool{}, arrived: make(chan struct{})}
	cfg := g.cfg.Consumer
	cfg.WorkerID = ex.ID
	cfg.Groups = slices.Clone(ex.Groups)
	cfg.Capacity = g.cfg.Capacity
	cfg.ClaimDemand = p.demand
	cfg.OnEvent = func(e mscheduler.Event) {
		p.track(e)
		g.onEvent(e)
	}
	if cfg.Logger == nil {
		cfg.Logger = g.cfg.Logger
	}
	c, err := mscheduler.NewConsumer(g.db.Collection(coll), p.handle, &cfg)
	if err != nil {
		return nil, &apiError{500, "gateway", err.Error(), nil}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolStartTimeout)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		return nil, serverError(err)
	}
	p.consumer = c
	return p, nil
}

// handle is the consumer's handler: it parks the run for a taker, then
// waits for its executor's outcome while the consumer keeps the lease.
func (p *pool) handle(ctx context.Context, task *mscheduler.Task[bson.RawValue]) (bson.RawValue, error) {
	r := newParked(p, task)
	prev := p.endRetryWait(r.runID) // the last attempt's error, on a retry
	p.g.register(r)
	defer p.g.unregister(r)
	select {
	case p.ready <- r:
		p.arrive(r.runID) // once in the queue: a take looks there first
	default: // takers gave up on as many runs as the pool holds
		p.arrive(r.runID)
		return bson.RawValue{}, p.untaken(prev, fmt.Errorf("no executor waits for the run: %w", mscheduler.ErrRelease))
	}
	if err := r.awaitTaker(ctx, p.g.cfg.UntakenHold); err != nil {
		return bson.RawValue{}, p.untaken(prev, err)
	}
	result, err := r.awaitOutcome(ctx)
	p.untake(r, err, ctx.Err() != nil)
	return result, err
}

// untaken is the error of a run nobody took: a release, unless the run is
// a retry, whose release would drop the failure before it (and with it
// MaxFailedRuns): then it fails with that failure, without more retries.
func (p *pool) untaken(prev, err error) error {
	if prev == nil || !errors.Is(err, mscheduler.ErrRelease) {
		return err
	}
	return mscheduler.SkipRetry(fmt.Errorf("%w (its retry was not taken: %v)", prev, err))
}

// endRetryWait ends a run's wait between attempts and returns the error of
// its last attempt; nil for a first attempt, or a run not of this pool.
func (p *pool) endRetryWait(runID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.failedLast[runID].err
	delete(p.failedLast, runID)
	return prev
}

// failedAttempt is a run's failed last attempt: its error, for a retry
// that nobody takes (see untaken), and whether the consumer retries it,
// holding the run through the retry delay for a taker.
type failedAttempt struct {
	err     error
	retried bool
}

// untake ends a run's time with its executor. A failure that the consumer
// retries keeps the run held through the retry delay: it is counted in
// the demand until its next attempt is parked, or the run ends in the
// delay (cancelled, its lease lost: see Gateway.onEvent).
func (p *pool) untake(r *parked, err error, cancelled bool) {
	retried := err != nil && !cancelled && !errors.Is(err, mscheduler.ErrRelease) && !r.final() && r.retries()
	p.mu.Lock()
	p.taken--
	if err != nil && !errors.Is(err, mscheduler.ErrRelease) {
		p.failedLast[r.runID] = failedAttempt{err: err, retried: retried}
	}
	p.mu.Unlock()
	p.consumer.Wake()
}

// take waits up to wait for at most n runs for ex, and hands them over. A
// take that does not wait gets what is due now: the consumer claims for it
// at once (ClaimNow), within UntakenHold, and it takes those runs.
func (p *pool) take(ctx context.Context, ex Executor, session string, n int, wait time.Duration) []*parked {
	p.mu.Lock()
	if p.closing { // stopped as idle as this take came: the executor takes again
		p.mu.Unlock()
		return nil
	}
	p.waiting += n
	p.mu.Unlock()
	var got []*parked
	defer func() {
		p.mu.Lock()
		p.waiting -= n - len(got)
		p.mu.Unlock()
	}()
	if wait == 0 {
		cctx, cancel := context.WithTimeout(ctx, p.g.cfg.UntakenHold)
		_ = p.consumer.ClaimNow(cctx) // past the bound, it takes what came
		cancel()
	} else {
		p.consumer.Wake()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(got) < n {
		var r *parked
		if len(got) > 0 || wait == 0 {
			// Runs parked or on their way: a claim's runs go out in one
			// answer, and those ClaimNow claimed are on their way.
			if r = p.another(ctx); r == nil && len(got) > 0 {
				// The consumer may be claiming more for this take now,
				// one claim after another: they go out in this answer,
				// not to no one once it has gone.
				lctx, cancel := context.WithTimeout(ctx, p.g.cfg.UntakenHold)
				_ = p.consumer.LookEnded(lctx)
				cancel()
				r = p.another(ctx)
			}
			if r == nil {
				return got
			}
		} else {
			select {
			case r = <-p.ready:
			case <-timer.C:
				return got
			case <-ctx.Done():
				return got
			case <-p.g.stopCh:
				return got
			}
		}
		if ctx.Err() != nil { // the taker went away as the run came: leave it for the next
			select {
			case p.ready <- r:
			default: // its hold passes and it is released
			}
			return got
		}
		if r.hand(ex.ID, session) {
			p.mu.Lock()
			p.waiting--
			p.taken++
			p.mu.Unlock()
			got = append(got, r)
		}
	}
	return got
}

// track follows the runs on their way to the ready queue: a run claimed
// is on its way until its handler parks it, or it ends first (its lease
// lost, the consumer stopping before its handler was called).
func (p *pool) track(e mscheduler.Event) {
	switch e.Kind {
	case mscheduler.EventClaimed:
		p.mu.Lock()
		p.arriving[e.RunID] = true
		p.mu.Unlock()
	case mscheduler.EventRenewed, mscheduler.EventRetried, mscheduler.EventError, mscheduler.EventSkipped:
	default:
		p.arrive(e.RunID)
	}
}

// arrive takes a run off the way to the ready queue.
func (p *pool) arrive(runID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.arriving[runID] {
		delete(p.arriving, runID)
		close(p.arrived)
		p.arrived = make(chan struct{})
	}
}

// onTheWay says whether runs are on their way to the ready queue, and
// returns the channel closed when one of them arrives.
func (p *pool) onTheWay() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.arriving) > 0, p.arrived
}

// another is a further run for a take that has some: one parked already,
// or one on its way, so that a claim's runs go out in one answer (the
// consumer announces every run of a claim before it calls their handlers:
// see mscheduler.EventClaimed); nil when none is parked or on its way.
// It waits for a run on its way as long as a parked run waits for a taker
// (UntakenHold), at most.
func (p *pool) another(ctx context.Context) *parked {
	var bound <-chan time.Time
	for {
		// On the way before the queue: a run parked between the two looks
		// is found in the queue.
		coming, arrived := p.onTheWay()
		select {
		case r := <-p.ready:
			return r
		default:
		}
		if !coming {
			return nil
		}
		if bound == nil {
			timer := time.NewTimer(p.g.cfg.UntakenHold)
			defer timer.Stop()
			bound = timer.C
		}
		select {
		case r := <-p.ready:
			return r
		case <-arrived:
		case <-bound:
			return nil
		case <-ctx.Done():
			return nil
		case <-p.g.stopCh:
			return nil
		}
	}
}

// register and unregister keep the index of held runs by run id.
func (g *Gateway) register(r *parked) {
	g.mu.Lock()
	g.runs[r.runID] = r
	g.mu.Unlock()
}

func (g *Gateway) unregister(r *parked) {
	g.mu.Lock()
	if g.runs[r.runID] == r {
		delete(g.runs, r.runID)
	}
	g.mu.Unlock()
}

// run finds the held run of an executor in a collection, or says why not.
func (g *Gateway) run(coll, runID, executor string) (*parked, *apiError) {
	g.mu.Lock()
	r := g.runs[runID]
	g.mu.Unlock()
	switch {
	case r == nil || r.pool.coll != coll:
		return nil, &apiError{409, "run_id", fmt.Sprintf("run %q is not held here: it ended, its lease was lost, or it never was", runID), nil}
	case r.executorID() != executor:
		return nil, &apiError{403, "run_id", fmt.Sprintf("run %q is not executor %q's", runID, executor), nil}
	}
	return r, nil
}

// returning hands an executor back, up to n, the runs of pool p it held
// under an earlier session: it restarted. The earlier sessions are over: a take
// from one of them is refused (errSessionOver), so that two processes
// sharing an executor id cannot pass its runs back and forth.
func (g *Gateway) returning(p *pool, ex Executor, session string, n int) ([]*parked, *apiError) {
	if session == "" {
		return nil, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[ex.ID]
	if s == nil {
		s = &sessions{over: map[string]bool{}}
		g.sessions[ex.ID] = s
	}
	switch {
	case s.over[session]:
		return nil, &apiError{409, "session", fmt.Sprintf("executor %q took with a newer session since: one executor id (one token) is for one process at a time", ex.ID), nil}
	case s.current != session:
		if s.current != "" {
			s.over[s.current] = true
		}
		s.current = session
	}
	var back []*parked
	for _, r := range g.runs {
		if len(back) < n && r.pool == p && r.redeliver(ex.ID, session) {
			back = append(back, r)
		}
	}
	return back, nil
}

// sessions are an executor's current session and those it restarted from.
type sessions struct {
	current string
	over    map[string]bool
}
