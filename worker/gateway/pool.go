package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// pool serves the executors of one collection and one set of groups with
// one pulling consumer.
type pool struct {
	g        *Gateway
	coll     string
	consumer *mscheduler.Consumer[bson.RawValue, bson.RawValue]
	ready    chan *parked // claimed runs waiting for a taker; cap Capacity

	mu      sync.Mutex // guards what follows
	waiting int        // runs the waiting takes still want
	taken   int        // runs with an executor
}

// demand is what the consumer should hold: the runs executors have, and
// those the waiting takes want (see ConsumerConfig.ClaimDemand).
func (p *pool) demand() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.taken + p.waiting
}

func poolKey(coll string, groups []string) string {
	return coll + "\x00" + strings.Join(sortedCopy(groups), ",")
}

// poolOf returns the pool of a collection and groups, started on first use.
func (g *Gateway) poolOf(ctx context.Context, coll string, groups []string) (*pool, *apiError) {
	if _, err := g.producer(ctx, coll); err != nil {
		return nil, err
	}
	key := poolKey(coll, groups)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, &apiError{503, "gateway", "the gateway is stopping"}
	}
	if p := g.pools[key]; p != nil {
		return p, nil
	}
	p := &pool{g: g, coll: coll, ready: make(chan *parked, g.cfg.Capacity)}
	cfg := g.cfg.Consumer
	cfg.WorkerID = workerIDOf(g.cfg.WorkerID, groups)
	cfg.Groups = slices.Clone(groups)
	cfg.Capacity = g.cfg.Capacity
	cfg.ClaimDemand = p.demand
	cfg.OnEvent = g.onEvent
	if cfg.Logger == nil {
		cfg.Logger = g.cfg.Logger
	}
	c, err := mscheduler.NewConsumer(g.db.Collection(coll), p.handle, &cfg)
	if err != nil {
		return nil, &apiError{500, "gateway", err.Error()}
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, serverError(err)
	}
	p.consumer = c
	g.pools[key] = p
	return p, nil
}

// workerIDOf names the consumer of a set of groups: a worker holds one run
// of a task at most, and each set of groups claims with its own filter.
func workerIDOf(base string, groups []string) string {
	if len(groups) == 0 {
		return base
	}
	return base + "-" + strings.Join(sortedCopy(groups), "+")
}

// handle is the consumer's handler: it parks the run for a taker, then
// waits for its executor's outcome while the consumer keeps the lease.
func (p *pool) handle(ctx context.Context, task *mscheduler.Task[bson.RawValue]) (bson.RawValue, error) {
	r := newParked(p, task)
	p.g.register(r)
	defer p.g.unregister(r)
	select {
	case p.ready <- r:
	default: // takers gave up on as many runs as the pool holds
		return bson.RawValue{}, fmt.Errorf("no executor waits for the run: %w", mscheduler.ErrRelease)
	}
	if err := r.awaitTaker(ctx, p.g.cfg.UntakenHold); err != nil {
		return bson.RawValue{}, err
	}
	defer p.untake()
	return r.awaitOutcome(ctx)
}

func (p *pool) untake() {
	p.mu.Lock()
	p.taken--
	p.mu.Unlock()
	p.consumer.Wake()
}

// take waits up to wait for at most n runs for ex, and hands them over.
func (p *pool) take(ctx context.Context, ex Executor, session string, n int, wait time.Duration) []*parked {
	p.mu.Lock()
	p.waiting += n
	p.mu.Unlock()
	p.consumer.Wake()
	var got []*parked
	defer func() {
		p.mu.Lock()
		p.waiting -= n - len(got)
		p.mu.Unlock()
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(got) < n {
		var r *parked
		if len(got) == 0 {
			select {
			case r = <-p.ready:
			case <-timer.C:
				return got
			case <-ctx.Done():
				return got
			case <-p.g.stopCh:
				return got
			}
		} else {
			select {
			case r = <-p.ready:
			case <-time.After(takeLinger):
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

// takeLinger is how long a take that has runs waits for more, so that a
// claim's batch goes out in one answer: the handlers of one claim start
// within it. Longer, and every take at low load pays it.
const takeLinger = 2 * time.Millisecond

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
		return nil, &apiError{409, "run_id", fmt.Sprintf("run %q is not held here: it ended, its lease was lost, or it never was", runID)}
	case r.executorID() != executor:
		return nil, &apiError{403, "run_id", fmt.Sprintf("run %q is not executor %q's", runID, executor)}
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
		return nil, &apiError{409, "session", fmt.Sprintf("executor %q took with a newer session since: one executor id (one token) is for one process at a time", ex.ID)}
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
