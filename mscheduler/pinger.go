package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"
)

// claimLease is the lease a claim takes before the run knows its task's
// worker_timeout (an update cannot read it from the document). The first
// ping, no later than claimLease/2, moves the lease to the task's own.
const claimLease = WorkerTimeoutDefault

// pingParallelism bounds the pings in flight at once.
const pingParallelism = 8

// activeRun is a run this worker holds.
type activeRun struct {
	key     string
	runID   string
	started time.Time
	cancel  context.CancelCauseFunc
	doc     *taskDoc // the task as claimed; read-only

	// leaseUntil (server UnixNano) is written by the pinger and read by the
	// run's goroutine for its record.
	leaseUntil atomic.Int64
	// lost is set by the pinger when the run was taken away; the run's
	// goroutine then writes nothing more about it.
	lost atomic.Bool
	// revoked is set by the pinger when the task stopped allowing this
	// worker; the run's goroutine then records the run as revoked.
	revoked atomic.Bool
	// finished is claimed (CompareAndSwap) by whoever writes the run's end:
	// the run's goroutine, or Stop for an abandoned run.
	finished atomic.Bool

	// Owned by the pinger goroutine after register.
	soleHolder    bool
	pingInterval  time.Duration
	workerTimeout time.Duration
	nextPing      time.Time // server time
}

func (r *activeRun) lease() time.Time { return time.Unix(0, r.leaseUntil.Load()) }

// pinger keeps the leases of this worker's runs: it pings each run every
// ping interval, cancels a run whose ping matches nothing (the run was
// taken away), and cancels a run whose pings kept failing until its lease
// lapsed.
type pinger struct {
	coll     *mongo.Collection
	workerID string
	groups   []string
	clock    *serverClock
	emit     func(Event)
	log      *slog.Logger
	caps     *capabilities

	mu   sync.Mutex            // guards runs: written by run goroutines, read by the loop
	runs map[string]*activeRun // by run id
	kick chan struct{}         // buffered 1: a run was added
}

func newPinger(coll *mongo.Collection, workerID string, groups []string, clock *serverClock, emit func(Event), log *slog.Logger, caps *capabilities) *pinger {
	return &pinger{coll: coll, workerID: workerID, groups: groups, clock: clock, emit: emit, log: log, caps: caps,
		runs: map[string]*activeRun{}, kick: make(chan struct{}, 1)}
}

func (p *pinger) add(r *activeRun) {
	first := min(r.pingInterval, claimLease/2)
	r.nextPing = r.started.Add(first)
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := p.pingDue(ctx)
		timer.Reset(max(next.Sub(p.clock.Now()), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-timer.C:
		}
	}
}

// pingDue pings every run whose time has come and returns when the next
// ping is due (read after the pings, which may change a run's interval).
func (p *pinger) pingDue(ctx context.Context) time.Time {
	now := p.clock.Now()
	var g errgroup.Group
	g.SetLimit(pingParallelism)
	for _, r := range p.snapshot() {
		if p.lapsed(r) {
			p.lose(r, "lease lapsed before a ping could renew it")
			continue
		}
		if r.nextPing.After(now) {
			continue
		}
		r.nextPing = now.Add(r.pingInterval)
		g.Go(func() error { p.ping(ctx, r); return nil })
	}
	_ = g.Wait()
	next := now.Add(time.Minute) // with no run, only a kick matters
	for _, r := range p.snapshot() {
		// A run's lease bounds the wait too: if its pings keep failing,
		// its handler is cancelled when the lease lapses, not later.
		next = minTime(next, r.nextPing, r.lease())
	}
	return next
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

type pingReply struct {
	Running         int      `bson:"running"`
	PingIntervalMS  int64    `bson:"ping_interval_ms"`
	WorkerTimeoutMS int64    `bson:"worker_timeout_ms"`
	WorkerIDs       []string `bson:"worker_ids"`
	Group           string   `bson:"group"`
}

// allows reports whether the task, as the ping read it, still lets this
// worker run it: an operator may have changed worker_ids or group.
func (r *pingReply) allows(workerID string, groups []string) bool {
	return (len(r.WorkerIDs) == 0 || slices.Contains(r.WorkerIDs, workerID)) &&
		(r.Group == "" || slices.Contains(groups, r.Group))
}

// ping renews one run's lease. The only holder of a task also sets
// next_expiry, exactly; with several holders it stays a lower bound that
// sweeps raise. Which case holds is guessed from the last reply and the
// other form is tried if the guess was wrong, so a ping is one command
// except when the number of holders crosses one.
func (p *pinger) ping(parent context.Context, r *activeRun) {
	now := p.clock.Now()
	// A ping is worth nothing once the lease it renews has lapsed: waiting
	// longer on an unreachable server would let the handler outlive it.
	ctx, cancel := context.WithTimeout(parent, max(r.lease().Sub(now), time.Millisecond))
	defer cancel()
	lease := now.Add(r.workerTimeout)
	reply, err := p.renew(ctx, r, lease, r.soleHolder)
	if err == nil && reply == nil {
		reply, err = p.renew(ctx, r, lease, !r.soleHolder)
	}
	switch {
	case err != nil:
		if parent.Err() != nil {
			return
		}
		p.log.Warn("ping failed", "key", r.key, "run_id", r.runID, "error", err)
		p.emit(Event{Kind: EventError, Key: r.key, RunID: r.runID, Err: err})
		if p.lapsed(r) {
			p.lose(r, "pings failed until the lease lapsed")
		}
	case reply == nil:
		p.lose(r, "ping matched nothing: the run was taken over")
	default:
		r.leaseUntil.Store(lease.UnixNano())
		r.soleHolder = reply.Running == 1
		if d := fromMS(reply.PingIntervalMS); d > 0 {
			r.pingInterval = d
			r.nextPing = now.Add(d)
		}
		if d := fromMS(reply.WorkerTimeoutMS); d > 0 {
			r.workerTimeout = d
		}
		if !reply.allows(p.workerID, p.groups) {
			p.revoke(r)
		}
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

func (p *pinger) renew(ctx context.Context, r *activeRun, lease time.Time, sole bool) (*pingReply, error) {
	filter := fence(r.key, p.workerID, r.runID)
	set := bson.D{{Key: holderPath(p.workerID, hLeaseUntil), Value: lease}}
	if sole {
		filter = append(filter, bson.E{Key: fRunning, Value: 1})
		set = append(set, bson.E{Key: fNextExpiry, Value: lease})
	} else {
		filter = append(filter, bson.E{Key: fRunning, Value: op("$ne", 1)})
	}
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	proj := bson.D{{Key: fRunning, Value: 1}, {Key: fPingIntervalMS, Value: 1}, {Key: fWorkerTimeoutMS, Value: 1}, {Key: fWorkerIDs, Value: 1}, {Key: fGroup, Value: 1}}
	var reply pingReply
	err := p.caps.findOneAndUpdate(ctx, p.coll, filter, bson.D{{Key: "$set", Value: set}}, opts, proj).Decode(&reply)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: ping run %s of %q: %w", r.runID, r.key, err)
	}
	return &reply, nil
}

// lose cancels a run that this worker no longer holds.
func (p *pinger) lose(r *activeRun, why string) {
	// A run whose end is being written is left to that write, which is
	// fenced too and reports a lost run itself.
	if r.finished.Load() || !r.lost.CompareAndSwap(false, true) {
		return
	}
	p.remove(r)
	p.log.Warn("lease lost; handler cancelled", "key", r.key, "run_id", r.runID, "reason", why)
	r.cancel(fmt.Errorf("%w: %s", ErrLeaseLost, why))
}
