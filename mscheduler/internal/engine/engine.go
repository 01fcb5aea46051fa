package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/mscheduler/mscheduler/mscheduler/internal/dbpoll"
	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/peers"
	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
	"github.com/mscheduler/mscheduler/mscheduler/internal/watch"
)

// Engine claims, leases and executes runs, and writes their ends: a
// consumer, with params and results as BSON. Config.Prepare, its front
// end's, turns a claimed task into the call of its handler.
type Engine struct {
	coll  *mongo.Collection
	cfg   *Config
	clock *serverclock.Clock
	log   *slog.Logger

	slots *semaphore.Weighted // one unit per run, from its claim until its end is written
	// held counts the slots taken: raised by the claim loop, lowered by
	// it (slots given back) and by each run as its end is written.
	held atomic.Int64
	// ending counts the runs whose handler is done and whose end is being
	// written: their slots free soon. Raised and lowered by each run.
	ending atomic.Int64
	// backlog is the claim loop's claimState.backlog, for the historian.
	backlog atomic.Bool
	running sync.WaitGroup // run goroutines
	pinger  *lease.Pinger
	ends    *runend.Batcher // nil when run ends are written alone
	history *history.Historian
	upkeep  *upkeep.Worker // the quarantine, sweeps, the check and maintenance
	peers   *peers.Registry
	wakeCh  chan struct{} // buffered 1: something may have become claimable
	passes  *claimPasses  // the claim loop's passes, for ClaimNow
	// slotFreed, buffered 1: a run is over, its slot free (see
	// slotFreedWake).
	slotFreed chan struct{}
	// admitted are the runs of the claim being admitted, announced and
	// waiting for their goroutines (see startRun); owned by the claim loop.
	admitted []admittedRun

	// leader says this consumer held the maintenance lease at its last
	// try; written by the upkeep loop, read by anyone.
	leader atomic.Bool
	// peerView is the newest view of the consumers alive (nil before the
	// first announce); see view and storeView.
	peerView atomic.Pointer[peerView]
	// reannounce, buffered 1: the claim loop asks the upkeep loop for an
	// announce soon.
	reannounce chan struct{}
	// suspects are the workers this consumer's sweeps found gone (see
	// gonepeers.go).
	suspects goneSuspects

	// limiter turns the server's latency into a limit on the runs held;
	// retries is the budget of commands sent again after a failure. Both
	// are fed by every component, read by the claim loop and Pressure.
	limiter *pressure.Limiter
	retries *retry.Budget

	// abandoned counts handler goroutines given up on and still running:
	// raised by the run that abandons one, lowered by the goroutine itself.
	abandoned atomic.Int64

	// fetchCtx stops the claim loop, the upkeep loop and the watcher; workCtx cancels
	// handlers; pingCtx stops the pinger, last, once no run is left; endCtx
	// gives up run ends still being written when Stop has waited enough.
	// All are set by Start and never change after.
	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	workCtx     context.Context
	workCancel  context.CancelCauseFunc
	pingCtx     context.Context
	pingCancel  context.CancelFunc
	endCtx      context.Context
	endCancel   context.CancelFunc
	histCancel  context.CancelFunc // stops the historian, after the last run end
	loops       sync.WaitGroup     // claim loop, watcher, pinger

	lifeMu  sync.Mutex // guards started, stopped and unsubscribe
	started bool
	stopped bool
	// unsubscribe ends the wakes from producers of this process (set by
	// Start, called by stop).
	unsubscribe func()
	stopOnce    sync.Once
	stopErr     error

	stream *watch.Stream // the change stream, when the server has one
	// poll is the consumer's part of its database's shared poll, when the
	// server has no change stream (see dbpoll.go).
	poll *dbpoll.Probe
	// skippedNow are the tasks the claim loop skips, and until when, as of
	// its last pass: written by the claim loop, read by the shared poll.
	skippedNow atomic.Pointer[skipList]
	// pollErr is a failure of the shared poll not yet reported: written by
	// the poll, taken by the claim loop.
	pollErr atomic.Pointer[error]
	// dueTimer wakes the claim loop when the next task the shared poll saw
	// becomes due (under dueMu).
	dueMu    sync.Mutex
	dueTimer *time.Timer
	// stretchedSaid are the tasks whose longer lease was logged (under
	// stretchedMu; see sayStretched).
	stretchedMu   sync.Mutex
	stretchedSaid map[string]struct{}
	// activity counts the signs of work in the collection (wakes, claims
	// that found work): the claim loop adds, the sweep loop reads it to
	// end a quiet stretch (see quiet.go).
	activity atomic.Uint64
	// quietPoll and quietSweep show the loops' quiet factors (QuietFactors).
	quietPoll, quietSweep atomic.Int32
	caps                  query.Caps
}

// New returns the engine of a consumer of coll, configured by cfg (its
// defaults applied and checked by the caller). It does no I/O.
func New(coll *mongo.Collection, c *Config) *Engine {
	con := &Engine{
		// Claims, run ends and pings read what they just wrote: only the
		// primary has it for sure.
		coll:       coll.Clone(options.Collection().SetWriteConcern(c.WriteConcern).SetReadPreference(readpref.Primary())),
		cfg:        c,
		clock:      clockFor(coll, c),
		log:        c.Logger.With("worker_id", c.WorkerID, "collection", coll.Name()),
		slots:      semaphore.NewWeighted(int64(c.Capacity)),
		wakeCh:     make(chan struct{}, 1),
		passes:     newClaimPasses(),
		slotFreed:  make(chan struct{}, 1),
		reannounce: make(chan struct{}, 1),
	}
	mono := monotonicNow(c.Monotonic)
	con.limiter = pressure.New(c.Capacity, mono, con.pressureChanged)
	con.retries = retry.NewBudget(mono)
	con.pinger = lease.New(con.coll, c.WorkerID, c.Groups, con.clock, lease.Notify{
		Renewed:    func(r *lease.Run) { con.emit(Event{Kind: EventRenewed, Key: r.Key, RunID: r.RunID}) },
		PingFailed: func(r *lease.Run, err error) { con.emit(Event{Kind: EventError, Key: r.Key, RunID: r.RunID, Err: err}) },
	}, lease.Causes{Cancelled: ErrCancelled, Revoked: ErrRevoked, LeaseLost: ErrLeaseLost}, con.log, &con.caps, c.PingBatchMax)
	con.pinger.Use(con.retries, con.limiter.Observe)
	if c.EndBatchMax > 1 {
		con.ends = runend.NewBatcher(con.coll, c.WorkerID, c.EndBatchMax, c.EndBatchWindow, con.Running)
	}
	var carrier history.Carrier // not a nil *runend.Batcher: that is no nil Carrier
	if con.ends != nil {
		carrier = con.ends
	}
	con.history = history.NewHistorian(con.coll, c.Retention, c.WriteTimeout, con.log, func(err error) {
		con.log.Warn("run history not written yet; the maintenance pass will", "error", err)
		con.emit(Event{Kind: EventError, Err: err})
	}, carrier, con.busy)
	con.stream = &watch.Stream{Coll: con.coll, Wake: con.wake, Cancel: con.cancelRuns, Error: con.loopError,
		Idle: func() bool { return con.held.Load() < int64(c.Capacity) }}
	con.poll = con.newPollProbe()
	con.peers = &peers.Registry{Meta: upkeep.MetaCollection(con.coll), WorkerID: c.WorkerID, Groups: c.Groups, Log: con.log}
	con.upkeep = &upkeep.Worker{
		Coll: con.coll, ID: c.WorkerID, Clock: con.clock, RunsKept: c.RunsKept, Retention: c.Retention,
		History: con.history, Log: con.log, Inspect: con.inspect, Advance: c.Documents.Advance,
		Report: upkeep.Report{
			Invalid: func(key, runID, workerID string, err error) {
				localwake.Ended(con.coll, key) // waiters wait for invalid as for final
				con.emit(Event{Kind: EventInvalid, Key: key, RunID: runID, WorkerID: workerID, Err: err})
			},
			Expired: func(key, runID, workerID string, lapsed time.Time) {
				localwake.Ended(con.coll, key)
				con.suspectGone(workerID, lapsed)
				con.emit(Event{Kind: EventExpired, Key: key, RunID: runID, WorkerID: workerID})
			},
			Error: func(err error) {
				ctx := con.fetchCtx // set by Start; a worker driven step by step has none
				if ctx == nil {
					ctx = context.Background()
				}
				con.loopError(ctx, err)
			},
			Wake: con.wake,
		},
	}
	return con
}

// inspect is the gate's verdict on a stored task.
func (c *Engine) inspect(raw bson.Raw) *stored.Problem {
	_, prob := c.cfg.Documents.Inspect(raw)
	return prob
}

// busy says runs are going, or the last claim left work waiting: either
// way a run end is on its way.
func (c *Engine) busy() bool { return c.Running() > 0 || c.backlog.Load() }

// WorkerID is the id this consumer claims runs under.
func (c *Engine) WorkerID() string { return c.cfg.WorkerID }

// ClockOffset is the last measured offset of the server's clock from the
// local one.
func (c *Engine) ClockOffset() time.Duration { return c.clock.Offset() }

// Start checks the collection's schema, measures the server clock, opens
// the change stream if the server has one, and starts the engine's loops
// (mscheduler.Consumer.Start). ctx bounds only this start-up.
func (c *Engine) Start(ctx context.Context) error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	switch {
	case c.stopped:
		return ErrStopped
	case c.started:
		return errors.New("mscheduler: consumer already started")
	}
	c.fetchCtx, c.fetchCancel = context.WithCancel(context.Background())
	c.workCtx, c.workCancel = context.WithCancelCause(context.Background())
	c.pingCtx, c.pingCancel = context.WithCancel(context.Background())
	c.endCtx, c.endCancel = context.WithCancel(context.Background())
	up := &upkeepState{}
	err := c.prepare(ctx, up)
	if err != nil {
		c.fetchCancel()
		c.workCancel(err)
		c.pingCancel()
		c.endCancel()
		return err
	}
	histCtx, histCancel := context.WithCancel(context.Background())
	c.histCancel = histCancel
	c.started = true
	c.unsubscribe = localwake.AddConsumer(c.coll, &localwake.Consumer{Wake: c.wakeCh, Cancel: c.cancelRuns})
	c.loops.Add(5)
	go func() { defer c.loops.Done(); c.pinger.Loop(c.pingCtx) }()
	go func() { defer c.loops.Done(); c.history.Loop(histCtx) }()
	go func() { defer c.loops.Done(); c.claimLoop(c.fetchCtx) }()
	go func() { defer c.loops.Done(); c.upkeepLoop(c.fetchCtx, up) }()
	go func() { defer c.loops.Done(); c.sweepLoop(c.fetchCtx) }()
	if c.ends != nil {
		c.loops.Add(1)
		go func() { defer c.loops.Done(); c.ends.Loop(c.endCtx) }()
	}
	return nil
}

// prepare does what Start must do before claims, its commands at once, so
// that on a slow server a start costs two round trips, not five: it
// measures the server clock while it checks the schema, then announces
// the consumer (with the server's time); it opens the change stream. The
// announce waits for the schema's check, which refuses a collection that
// is no task collection before anything is written beside it. The first
// announce failing is no error: the upkeep loop tries again.
func (c *Engine) prepare(ctx context.Context, up *upkeepState) error {
	var g errgroup.Group
	schemaChecked := make(chan error, 1)
	g.Go(func() error {
		err := c.cfg.Documents.EnsureSchema(ctx, c.coll, c.log)
		schemaChecked <- err
		return err
	})
	g.Go(func() error {
		if err := c.clock.Ensure(ctx, c.coll.Database()); err != nil {
			return err
		}
		if err := <-schemaChecked; err != nil {
			return nil // the schema's goroutine returns it
		}
		if err := c.announce(ctx, up); err != nil {
			c.log.Warn("could not announce the consumer; trying again soon", "error", err)
			return nil
		}
		up.announceAt = c.clock.Now().Add(jitter(min(c.cfg.MaintenanceInterval, announceSoon)))
		return nil
	})
	g.Go(func() error {
		if err := c.caps.Probe(ctx, c.coll); err != nil {
			c.log.Debug("could not learn whether the server takes a projection on findAndModify", "error", err)
		}
		return nil
	})
	g.Go(func() error { return c.openStream(ctx) })
	c.warmPool(ctx, &g, 4)
	err := g.Wait()
	if err != nil {
		c.stream.Close()
		c.poll.Close()
	}
	return err
}

// Stop stops claiming, waits for the runs until ctx is done, then cancels
// and releases them, the pinger stopping last (mscheduler.Consumer.Stop).
// It is idempotent and safe to call before Start.
func (c *Engine) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *Engine) stop(ctx context.Context) error {
	c.lifeMu.Lock()
	c.stopped = true
	started := c.started
	c.lifeMu.Unlock()
	if !started {
		return nil
	}
	c.unsubscribe()
	c.stream.Close()
	c.poll.Close()
	c.stopDueTimer()
	c.fetchCancel()
	if err := c.slots.Acquire(ctx, int64(c.cfg.Capacity)); err != nil {
		c.workCancel(ErrShutdown)
		grace, cancel := context.WithTimeout(context.Background(), c.cfg.ReleaseTimeout)
		err = c.slots.Acquire(grace, int64(c.cfg.Capacity))
		cancel()
		if err != nil {
			c.releaseAbandoned()
		}
	}
	c.awaitRuns(c.cfg.WriteTimeout)
	c.endCancel()
	c.workCancel(ErrShutdown)
	c.pingCancel()
	c.histCancel()
	c.loops.Wait()
	c.leave()
	return nil
}

// leave removes this consumer from the consumers alive, so that the
// others poll at their share again at once, not after it lapses.
func (c *Engine) leave() {
	ctx, cancel := retry.Bounded(context.Background(), min(c.cfg.WriteTimeout, time.Second), errWriteTimeout)
	defer cancel()
	if err := c.peers.Forget(ctx, []string{c.cfg.WorkerID}, nil); err != nil {
		c.log.Debug("could not leave the consumers alive; the entry lapses", "error", err)
	}
}

// awaitRuns waits up to limit for the run goroutines still going: ones
// whose end is being written, or whose handler was abandoned (they write
// nothing once Stop released their run).
func (c *Engine) awaitRuns(limit time.Duration) {
	done := make(chan struct{})
	go func() { c.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		c.log.Warn("stopping with run ends still being written; their leases will lapse", "waited", limit)
	}
}

// Running is the number of runs this consumer holds now.
func (c *Engine) Running() int {
	return c.pinger.Len()
}

// Holding is how many slots this consumer has taken: its runs, until
// their ends are written, and while a claim is under way, every slot it
// claims for.
func (c *Engine) Holding() int { return int(c.held.Load()) }

// Capacity is the most runs this consumer holds at once.
func (c *Engine) Capacity() int { return c.cfg.Capacity }

// MaxResultBytes is the largest encoded result a run end stores.
func (c *Engine) MaxResultBytes() int { return c.cfg.MaxResultBytes }

// cancelRuns cancels this consumer's runs of the task key (it was
// cancelled); their ends are recorded as cancelled.
func (c *Engine) cancelRuns(key string) {
	for _, r := range c.pinger.Snapshot() {
		if r.Key == key {
			lease.CancelRun(r, ErrCancelled)
		}
	}
}

// tellIfEnded tells the process's waiters of task key when update, which
// this consumer applied, ended it: no run end will tell them of a task
// ended with no run going (a plan finished at its claim).
func (c *Engine) tellIfEnded(key string, update bson.D) {
	if taskstate.EndsTask(update) {
		localwake.Ended(c.coll, key)
	}
}

// wake tells the claim loop that a task may have become claimable.
// Wake makes the consumer look for claimable tasks now, as a change
// stream event or its own run ends do; with ClaimDemand, call it when the
// demand rises.
func (c *Engine) Wake() { c.wake() }

func (c *Engine) wake() {
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

func (c *Engine) emit(e Event) {
	if e.WorkerID == "" {
		e.WorkerID = c.cfg.WorkerID
	}
	if e.At.IsZero() {
		e.At = c.clock.Now()
	}
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(e)
	}
}

// writeCtx bounds a write that must happen even while the consumer stops.
func (c *Engine) writeCtx() (context.Context, context.CancelFunc) {
	return retry.Bounded(context.Background(), c.cfg.WriteTimeout, errWriteTimeout)
}
