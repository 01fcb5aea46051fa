package mscheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/peers"
	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
	"github.com/mscheduler/mscheduler/mscheduler/internal/watch"
)

// Handler executes one run of a task. It returns the run's result, stored in
// the run record, or an error, retried locally up to the task's MaxRetries.
// Its context is cancelled when the run's lease is lost ([ErrLeaseLost]) or
// when the consumer stops past its deadline ([ErrShutdown]); see
// context.Cause.
type Handler[P, R any] func(ctx context.Context, task *Task[P]) (R, error)

// RunFunc runs one attempt of a task's handler and returns its error.
type RunFunc func(ctx context.Context, attempt *Attempt) error

// Attempt is the handler attempt a RunFunc runs.
type Attempt struct {
	Key string
	Run *Run // the run's id, worker, attempt number, start and planned time
	// Headers are the task's [Task].Headers, such as the publisher's trace
	// context; nil when it has none. Middleware reads them, and must not
	// change them.
	Headers map[string]string
}

// Middleware wraps every handler attempt, for tracing, logging or metrics
// around each run: it calls next to run the attempt (or does not, to skip
// it with an error) and returns the attempt's error, which it may change.
type Middleware func(next RunFunc) RunFunc

// Discovery says how a consumer learns about new claimable tasks.
type Discovery string

const (
	// DiscoveryAuto uses a change stream where the server has them and polls
	// otherwise.
	DiscoveryAuto Discovery = "auto"
	// DiscoveryPoll only polls.
	DiscoveryPoll Discovery = "poll"
	// DiscoveryChangeStream requires a change stream; Start fails without one.
	DiscoveryChangeStream Discovery = "change_stream"
)

// Defaults of ConsumerConfig.
const (
	CapacityDefault                 = 10
	PollIntervalDefault             = time.Second
	ChangeStreamPollIntervalDefault = 15 * time.Second
	SweepIntervalDefault            = 5 * time.Second
	PingBatchMaxDefault             = 64
	ClaimBatchMaxDefault            = 64
	EndBatchMaxDefault              = 64
	EndBatchWindowDefault           = 2 * time.Millisecond
	ClaimBatchWindowDefault         = 5 * time.Millisecond
	ClaimSpareForDefault            = 10 * time.Second
	ReleaseTimeoutDefault           = 5 * time.Second
	TimeoutDefault                  = time.Hour
	TimeoutGraceDefault             = 5 * time.Second
	WriteTimeoutDefault             = 10 * time.Second
	RunsKeptDefault                 = 20
	CheckIntervalDefault            = time.Minute
	MaxResultBytesDefault           = 64 << 10
	MaxErrorBytesDefault            = 8 << 10
)

// NoEndBatchWindow, as [ConsumerConfig.EndBatchWindow], sends each batch of
// run ends as soon as the previous one is written, without waiting for
// more.
const NoEndBatchWindow time.Duration = -1

// NoClaimBatchWindow, as [ConsumerConfig.ClaimBatchWindow], claims the
// slots free as soon as a claim is due.
const NoClaimBatchWindow time.Duration = -1

// NoClaimSpares, as [ConsumerConfig.ClaimSpareFor], reads candidates
// afresh for every claim.
const NoClaimSpares time.Duration = -1

// RunsBudgetBytes bounds what the kept run records of one task may take:
// RunsKept × (MaxResultBytes + MaxErrorBytes + 1 KiB) must fit in it, so
// that with params of at most [MaxParamsBytes] a task document always
// stays below MongoDB's 16 MiB limit and every run end fits.
const RunsBudgetBytes = 7 << 20

// runRecordBytes is what a run record takes besides its result and error.
const runRecordBytes = 1 << 10

// ConsumerConfig configures a [Consumer]. The zero value is ready to use.
// Most programs set only the first few fields: who the worker is, how many
// handlers run at once, their deadline, and where logs and events go.
type ConsumerConfig struct {
	// WorkerID names this worker in the task documents. It must not contain
	// '.' or start with '$'. Defaults to [DefaultWorkerID].
	WorkerID string
	// Groups are the worker groups this worker belongs to: it may run tasks
	// targeted at any of them, and tasks with no group. Defaults to none.
	Groups []string
	// Capacity is the most handlers that run at once; the consumer never
	// claims more runs than it has free slots. Defaults to [CapacityDefault].
	Capacity int
	// Timeout is the deadline of each handler attempt of tasks that set no
	// Timeout of their own. Defaults to [TimeoutDefault].
	Timeout time.Duration
	// Logger receives structured logs with the task key, run id and worker
	// id: a failed run at Warn, a released, revoked or cancelled one at
	// Info, a successful one at Debug (OnEvent or the metrics count them).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called for every [Event], from the goroutine where
	// it happens. It must not block.
	OnEvent func(Event)
	// Middleware wraps every handler attempt; the first is the outermost.
	// Defaults to none.
	Middleware []Middleware
	// ClaimDemand, when set, makes the consumer pull: it is the most runs
	// the consumer should hold now, claimed runs not yet handed to their
	// handler included, and claims stop there, whatever slots are free.
	// It is for handlers that hand runs on to executors waiting elsewhere,
	// as the HTTP gateway does. Call [Consumer.Wake] when it rises.
	// Defaults to none: claims fill the free slots.
	ClaimDemand func() int

	// The fields below tune discovery, claims, batches, leases, writes and
	// maintenance for load and for the server; their defaults suit most
	// deployments (see the README's "Consumers" and "Guarantees").

	// Discovery defaults to [DiscoveryAuto].
	Discovery Discovery
	// PollInterval is how often the consumer looks for claimable tasks when
	// it has free slots and no change stream, with ±20% jitter so that
	// workers do not poll in step. Defaults to [PollIntervalDefault].
	PollInterval time.Duration
	// ChangeStreamPollInterval is the fallback poll while a change stream is
	// open. Defaults to [ChangeStreamPollIntervalDefault].
	ChangeStreamPollInterval time.Duration
	// SweepInterval is the longest time between two looks for runs whose
	// lease lapsed; the consumer also looks when the earliest lease it knows
	// of runs out. Defaults to [SweepIntervalDefault].
	SweepInterval time.Duration
	// PollBudget is how many consumers' worth of polls and sweeps the
	// consumers of a collection send together. With N > PollBudget of them
	// alive, each polls and sweeps N/PollBudget times less often, so that
	// N idle workers cost the server what PollBudget cost, and the
	// collection is still polled PollBudget times per PollInterval. Each
	// consumer learns N at its maintenance tries. Defaults to
	// [PollBudgetDefault]; [NoPollBudget] has each consumer keep its own
	// intervals.
	PollBudget int
	// ClaimBatchMax is the most runs one claim takes. A consumer with 4
	// or more free slots and work waiting fills them with three commands
	// whatever their number (a query for candidates, one update with a
	// claim statement per candidate, one read of the claims won) instead
	// of one each (two, the read left out, when every task claimed has
	// concurrency 1); fewer free slots are claimed with a findAndModify
	// each. 1 claims each run alone. Defaults to [ClaimBatchMaxDefault].
	ClaimBatchMax int
	// ClaimBatchWindow is how long a claim waits for more free slots when
	// work is waiting and not every slot (at most ClaimBatchMax, within
	// the pressure limit) is free, or runs of this consumer are writing
	// their ends: runs going free theirs soon (those of one batched end all
	// at once), and one batch claim of many costs three commands as one of
	// a few does. It applies only from a capacity of 8 and while the last
	// claim found more work than it took, so a task at a time is claimed
	// at once. On a slow server the wait is the current round trip when
	// that is longer, up to a second. Defaults to
	// [ClaimBatchWindowDefault]; set [NoClaimBatchWindow] to claim whatever
	// is free at once.
	ClaimBatchWindow time.Duration
	// ClaimSpareFor is how long candidates that a batch claim read but did
	// not choose may serve the next claims of this consumer while work is
	// waiting: a claim from them is one command (the update; two when a
	// read back is needed) instead of a query for candidates first, and
	// with work waiting even one free slot is claimed that way. The price
	// is that a task published meanwhile with a higher priority than the
	// candidates may wait that long for this consumer. Defaults to
	// [ClaimSpareForDefault]; set [NoClaimSpares] to read candidates for
	// every claim.
	ClaimSpareFor time.Duration
	// TargetedClaims makes every claim, even of one slot, go by the
	// candidate query and a write by _id, as batch claims do, instead of a
	// findAndModify that selects its task by the claim filter. A task
	// collection sharded on _id needs it on MongoDB before 7.1, where a
	// findAndModify must name the shard key. Defaults to false.
	TargetedClaims bool
	// PingBatchMax is the most runs one ping renews. A worker holding
	// several runs of the collection renews them together, in two commands
	// (a fenced update statement per run, and one read back) instead of
	// one each; a run whose ping falls within half its interval of one due
	// is renewed with it, so that the pings of a busy worker fall in step.
	// 1 pings each run alone. Defaults to [PingBatchMaxDefault].
	PingBatchMax int
	// EndBatchMax is the most run ends written in one command. Run ends
	// that are ready together are written as one unordered update with a
	// statement per run, each fenced on its run; a statement that matched
	// nothing is sorted out by one read, and only its run end is written
	// again alone. 1 writes each run end alone. Defaults to
	// [EndBatchMaxDefault].
	EndBatchMax int
	// EndBatchWindow is how long a batch of run ends waits for more while
	// other runs of this consumer are going. A lone run never waits, and a
	// batch goes as soon as it is full. Defaults to [EndBatchWindowDefault];
	// set [NoEndBatchWindow] to send each batch as soon as the previous one
	// is written.
	EndBatchWindow time.Duration
	// ReleaseTimeout is how long Stop waits, after cancelling handlers, for
	// them to return before it releases their runs anyway and abandons them.
	// Defaults to [ReleaseTimeoutDefault].
	ReleaseTimeout time.Duration
	// TimeoutGrace is how long a handler may ignore its cancelled context
	// (a deadline, a lost lease) before the run gives up on it: the run is
	// failed at once, freeing its slot, and the goroutine is abandoned.
	// Defaults to [TimeoutGraceDefault].
	TimeoutGrace time.Duration
	// WriteTimeout bounds the writes that no lease bounds (setting a task
	// invalid, a plan's gate, Stop's wait for run ends) and is the least
	// time a claim is given: a claim waits up to half the lease it takes,
	// and a run's end is tried again while the run's lease is kept.
	// Defaults to [WriteTimeoutDefault].
	WriteTimeout time.Duration
	// RunsKept is how many finished runs a task document keeps. Defaults to
	// [RunsKeptDefault].
	RunsKept int
	// MaxResultBytes caps the encoded result of a run: a larger result is
	// not stored, and the run fails with an error that says so. Defaults to
	// [MaxResultBytesDefault], or less when RunsKept is large: see
	// [RunsBudgetBytes].
	MaxResultBytes int
	// MaxErrorBytes caps the error text stored with a run; a longer one is
	// cut, saying so. Defaults to [MaxErrorBytesDefault].
	MaxErrorBytes int
	// Retention is how long the tasks this consumer's run ends finish, and
	// their run records, are kept; set it as the producers' Retention.
	// Zero fields take defaults.
	Retention Retention
	// resultCapDerived says MaxResultBytes was derived from RunsKept.
	resultCapDerived bool

	// MaintenanceInterval is how often the consumer tries to take the
	// collection's maintenance lease; the one worker holding it deletes
	// tasks and run records past their retention (on a server without TTL
	// indexes) and writes run history records left unwritten. Defaults to
	// [MaintenanceIntervalDefault].
	MaintenanceInterval time.Duration
	// CheckInterval is how often the consumer holding the collection's
	// maintenance lease looks for task documents that
	// no claim can match (a missing or unknown status, a run_at that is not
	// a date, a missing counter, ...), as hand edits leave them, and sets
	// them invalid with the reason. Defaults to [CheckIntervalDefault].
	CheckInterval time.Duration
	// WriteConcern of every write. Defaults to majority: a run end
	// acknowledged with w:1 can be rolled back by a failover, and the run
	// would then execute again.
	WriteConcern *writeconcern.WriteConcern
	// Clock is the local wall clock. Lease and schedule decisions do not
	// read it: they use the server's time, measured every
	// ClockSyncInterval and carried forward by Monotonic. The wall clock
	// only tells when to measure again at once: when it moves apart from
	// Monotonic by more than [ClockStepThreshold] (a step, a resumed VM).
	// Defaults to time.Now.
	Clock func() time.Time
	// Monotonic is a clock that is never stepped: the time elapsed since a
	// fixed origin. Defaults to the runtime's monotonic clock.
	Monotonic func() time.Duration
	// ClockSyncInterval is how often the server's clock is measured again.
	// Defaults to [ClockSyncIntervalDefault].
	ClockSyncInterval time.Duration
}

// DefaultWorkerID is host-pid-8 hex digits of a random UUID, with any '.' of
// the host name replaced by '-'.
func DefaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	host = strings.NewReplacer(".", "-", "$", "-").Replace(host)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
}

func (c *ConsumerConfig) withDefaults() *ConsumerConfig {
	out := ConsumerConfig{}
	if c != nil {
		out = *c
	}
	if out.WorkerID == "" {
		out.WorkerID = DefaultWorkerID()
	}
	out.Capacity = cmp.Or(out.Capacity, CapacityDefault)
	out.Discovery = cmp.Or(out.Discovery, DiscoveryAuto)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.ChangeStreamPollInterval = cmp.Or(out.ChangeStreamPollInterval, ChangeStreamPollIntervalDefault)
	out.SweepInterval = cmp.Or(out.SweepInterval, SweepIntervalDefault)
	out.PollBudget = cmp.Or(out.PollBudget, PollBudgetDefault)
	out.ClaimBatchMax = cmp.Or(out.ClaimBatchMax, ClaimBatchMaxDefault)
	switch out.ClaimBatchWindow {
	case 0:
		out.ClaimBatchWindow = ClaimBatchWindowDefault
	case NoClaimBatchWindow:
		out.ClaimBatchWindow = 0
	}
	switch out.ClaimSpareFor {
	case 0:
		out.ClaimSpareFor = ClaimSpareForDefault
	case NoClaimSpares:
		out.ClaimSpareFor = 0
	}
	out.PingBatchMax = cmp.Or(out.PingBatchMax, PingBatchMaxDefault)
	out.EndBatchMax = cmp.Or(out.EndBatchMax, EndBatchMaxDefault)
	switch out.EndBatchWindow {
	case 0:
		out.EndBatchWindow = EndBatchWindowDefault
	case NoEndBatchWindow:
		out.EndBatchWindow = 0
	}
	out.ReleaseTimeout = cmp.Or(out.ReleaseTimeout, ReleaseTimeoutDefault)
	out.Timeout = cmp.Or(out.Timeout, TimeoutDefault)
	out.TimeoutGrace = cmp.Or(out.TimeoutGrace, TimeoutGraceDefault)
	out.WriteTimeout = cmp.Or(out.WriteTimeout, WriteTimeoutDefault)
	out.RunsKept = cmp.Or(out.RunsKept, RunsKeptDefault)
	out.MaxErrorBytes = cmp.Or(out.MaxErrorBytes, MaxErrorBytesDefault)
	if out.MaxResultBytes == 0 {
		out.MaxResultBytes = min(MaxResultBytesDefault, RunsBudgetBytes/max(out.RunsKept, 1)-out.MaxErrorBytes-runRecordBytes)
		out.resultCapDerived = true
	}
	out.CheckInterval = cmp.Or(out.CheckInterval, CheckIntervalDefault)
	out.MaintenanceInterval = cmp.Or(out.MaintenanceInterval, MaintenanceIntervalDefault)
	out.Retention = out.Retention.withDefaults()
	out.ClockSyncInterval = cmp.Or(out.ClockSyncInterval, ClockSyncIntervalDefault)
	if out.WriteConcern == nil {
		out.WriteConcern = writeconcern.Majority()
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return &out
}

func (c *ConsumerConfig) validate() error {
	if err := ValidateWorkerID(c.WorkerID); err != nil {
		return err
	}
	for i, g := range c.Groups {
		if g == "" {
			return invalid(fmt.Sprintf("Groups[%d]", i), "must not be empty")
		}
	}
	switch {
	case c.Capacity < 1:
		return invalid("Capacity", "must be at least 1, got %d", c.Capacity)
	case c.Discovery != DiscoveryAuto && c.Discovery != DiscoveryPoll && c.Discovery != DiscoveryChangeStream:
		return invalid("Discovery", "must be auto, poll or change_stream, got %q", c.Discovery)
	case c.PollInterval < 0:
		return invalid("PollInterval", "must not be negative, got %s", c.PollInterval)
	case c.ChangeStreamPollInterval < 0:
		return invalid("ChangeStreamPollInterval", "must not be negative, got %s", c.ChangeStreamPollInterval)
	case c.SweepInterval < 0:
		return invalid("SweepInterval", "must not be negative, got %s", c.SweepInterval)
	case c.PollBudget < 1 && c.PollBudget != NoPollBudget:
		return invalid("PollBudget", "must be at least 1, or NoPollBudget, got %d", c.PollBudget)
	case c.ClaimBatchMax < 1:
		return invalid("ClaimBatchMax", "must be at least 1, got %d", c.ClaimBatchMax)
	case c.PingBatchMax < 1:
		return invalid("PingBatchMax", "must be at least 1, got %d", c.PingBatchMax)
	case c.EndBatchMax < 1:
		return invalid("EndBatchMax", "must be at least 1, got %d", c.EndBatchMax)
	case c.ClaimBatchWindow < 0 || c.ClaimBatchWindow > time.Second:
		return invalid("ClaimBatchWindow", "must be NoClaimBatchWindow or between 0 and 1s, got %s", c.ClaimBatchWindow)
	case c.ClaimSpareFor < 0 || c.ClaimSpareFor > time.Minute:
		return invalid("ClaimSpareFor", "must be NoClaimSpares or between 0 and 1m, got %s", c.ClaimSpareFor)
	case c.EndBatchWindow < 0 || c.EndBatchWindow > time.Second:
		return invalid("EndBatchWindow", "must be NoEndBatchWindow or between 0 and 1s, got %s", c.EndBatchWindow)
	case c.Timeout < 0:
		return invalid("Timeout", "must not be negative, got %s", c.Timeout)
	case c.TimeoutGrace < 0:
		return invalid("TimeoutGrace", "must not be negative, got %s", c.TimeoutGrace)
	case c.ReleaseTimeout < 0:
		return invalid("ReleaseTimeout", "must not be negative, got %s", c.ReleaseTimeout)
	case c.WriteTimeout < 0:
		return invalid("WriteTimeout", "must not be negative, got %s", c.WriteTimeout)
	case c.RunsKept < 1:
		return invalid("RunsKept", "must be at least 1, got %d", c.RunsKept)
	case c.MaxErrorBytes < 64:
		return invalid("MaxErrorBytes", "must be at least 64, got %d", c.MaxErrorBytes)
	case c.MaintenanceInterval < 0:
		return invalid("MaintenanceInterval", "must not be negative, got %s", c.MaintenanceInterval)
	case c.CheckInterval < 0:
		return invalid("CheckInterval", "must not be negative, got %s", c.CheckInterval)
	case c.Retention.validate("Retention.") != nil:
		return c.Retention.validate("Retention.")
	case c.MaxResultBytes < 0 || int64(c.RunsKept)*int64(c.MaxResultBytes+c.MaxErrorBytes+runRecordBytes) > RunsBudgetBytes:
		field := "MaxResultBytes"
		if c.resultCapDerived {
			field = "RunsKept"
		}
		return invalid(field, "RunsKept (%d) × (MaxResultBytes (%d) + MaxErrorBytes (%d) + 1 KiB) must be at most RunsBudgetBytes (%d), so that a task document stays below 16 MiB",
			c.RunsKept, c.MaxResultBytes, c.MaxErrorBytes, RunsBudgetBytes)
	}
	return nil
}

// Consumer claims and executes tasks with parameters P, recording results
// R. Start it once; Stop it once it is no longer needed.
//
// It is the typed layer of the consumer's engine, which claims, leases and
// ends runs of task documents whatever their params: the layer decodes
// each claimed task's params into P for the handler and encodes its R. The
// HTTP gateway is the engine's other front end (worker/gateway).
type Consumer[P, R any] struct {
	*engine
}

// engine claims, leases and executes runs, and writes their ends: the
// Consumer, with params and results as BSON. Its prepare, set by the typed
// layer, turns a claimed task into the call of its handler.
type engine struct {
	coll        *mongo.Collection
	prepareCall prepareFunc
	cfg         *ConsumerConfig
	clock       *serverClock
	log         *slog.Logger

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
	// slotFreed, buffered 1: a run is over, its slot free (see
	// slotFreedWake).
	slotFreed chan struct{}

	// leader says this consumer held the maintenance lease at its last
	// try; written by the upkeep loop, read by anyone.
	leader atomic.Bool
	// peerView is the last announce's view of the consumers alive
	// (nil before the first); see view.
	peerView atomic.Pointer[peerView]
	// reannounce, buffered 1: the claim loop asks the upkeep loop for an
	// announce soon.
	reannounce chan struct{}

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
	caps   capabilities
}

// NewConsumer returns a consumer of coll that runs handler. It does no I/O.
func NewConsumer[P, R any](coll *mongo.Collection, handler Handler[P, R], cfg *ConsumerConfig) (*Consumer[P, R], error) {
	if handler == nil {
		return nil, invalid("handler", "must not be nil")
	}
	var middleware []Middleware
	if cfg != nil {
		middleware = cfg.Middleware
	}
	e, err := newEngine(coll, typedPrepare(handler, middleware), cfg)
	if err != nil {
		return nil, err
	}
	return &Consumer[P, R]{engine: e}, nil
}

// newEngine returns the engine of a consumer of coll, whose claimed tasks
// prepare turns into handler calls. It does no I/O.
func newEngine(coll *mongo.Collection, prepare prepareFunc, cfg *ConsumerConfig) (*engine, error) {
	if coll == nil {
		return nil, invalid("coll", "must not be nil")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	con := &engine{
		// Claims, run ends and pings read what they just wrote: only the
		// primary has it for sure.
		coll:        coll.Clone(options.Collection().SetWriteConcern(c.WriteConcern).SetReadPreference(readpref.Primary())),
		prepareCall: prepare,
		cfg:         c,
		clock:       newServerClock(c.Clock, c.Monotonic, c.ClockSyncInterval),
		log:         c.Logger.With("worker_id", c.WorkerID, "collection", coll.Name()),
		slots:       semaphore.NewWeighted(int64(c.Capacity)),
		wakeCh:      make(chan struct{}, 1),
		slotFreed:   make(chan struct{}, 1),
		reannounce:  make(chan struct{}, 1),
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
	con.history = history.NewHistorian(con.coll, c.Retention.policy(), c.WriteTimeout, con.log, func(err error) {
		con.log.Warn("run history not written yet; the maintenance pass will", "error", err)
		con.emit(Event{Kind: EventError, Err: err})
	}, carrier, con.busy)
	con.stream = &watch.Stream{Coll: con.coll, Wake: con.wake, Cancel: con.cancelRuns, Error: con.loopError}
	con.peers = &peers.Registry{Meta: metaCollection(con.coll), WorkerID: c.WorkerID, Groups: c.Groups, Log: con.log}
	con.upkeep = &upkeep.Worker{
		Coll: con.coll, ID: c.WorkerID, Clock: con.clock, RunsKept: c.RunsKept, Retention: c.Retention.policy(),
		History: con.history, Log: con.log, Inspect: inspect, Advance: newPlanAdvance,
		Report: upkeep.Report{
			Invalid: func(key, runID, workerID string, err error) {
				con.emit(Event{Kind: EventInvalid, Key: key, RunID: runID, WorkerID: workerID, Err: err})
			},
			Expired: func(key, runID, workerID string) {
				localwake.Ended(con.coll, key)
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
	return con, nil
}

// busy says runs are going, or the last claim left work waiting: either
// way a batch of run ends is on its way.
func (c *engine) busy() bool { return c.Running() > 0 || c.backlog.Load() }

// WorkerID is the id this consumer claims runs under.
func (c *engine) WorkerID() string { return c.cfg.WorkerID }

// ClockOffset is the last measured offset of the server's clock from the
// local one.
func (c *engine) ClockOffset() time.Duration { return c.clock.Offset() }

// Start checks the collection's schema version (see [EnsureIndexes]: a
// newer one is refused, an older one migrated), measures the server clock,
// opens the change stream if the server
// has one, and starts claiming in the background. ctx bounds only this
// start-up; the consumer runs until Stop.
func (c *engine) Start(ctx context.Context) error {
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
	stream, err := c.prepare(ctx, up)
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
	c.loops.Add(4)
	go func() { defer c.loops.Done(); c.pinger.Loop(c.pingCtx) }()
	go func() { defer c.loops.Done(); c.history.Loop(histCtx) }()
	go func() { defer c.loops.Done(); c.claimLoop(c.fetchCtx) }()
	go func() { defer c.loops.Done(); c.upkeepLoop(c.fetchCtx, up) }()
	if c.ends != nil {
		c.loops.Add(1)
		go func() { defer c.loops.Done(); c.ends.Loop(c.endCtx) }()
	}
	if stream != nil {
		c.loops.Add(1)
		go func() { defer c.loops.Done(); c.stream.Loop(c.fetchCtx, stream) }()
	}
	return nil
}

// prepare does what Start must do before claims, its commands at once, so
// that on a slow server a start costs two round trips, not five: it
// measures the server clock, then announces the consumer (with the
// server's time); it checks the schema; it opens the change stream. The
// first announce failing is no error: the upkeep loop tries again.
func (c *engine) prepare(ctx context.Context, up *upkeepState) (*mongo.ChangeStream, error) {
	var g errgroup.Group
	g.Go(func() error {
		if err := c.clock.Ensure(ctx, c.coll.Database()); err != nil {
			return err
		}
		if err := c.announce(ctx, up); err != nil {
			c.log.Warn("could not announce the consumer; trying again soon", "error", err)
			return nil
		}
		up.announceAt = c.clock.Now().Add(jitter(min(c.cfg.MaintenanceInterval, announceSoon)))
		return nil
	})
	g.Go(func() error { return ensureSchema(ctx, c.coll, c.log) })
	g.Go(func() error {
		if err := c.caps.Probe(ctx, c.coll); err != nil {
			c.log.Debug("could not learn whether the server takes a projection on findAndModify", "error", err)
		}
		return nil
	})
	var stream *mongo.ChangeStream
	g.Go(func() (err error) {
		stream, err = c.openStream(ctx)
		return err
	})
	c.warmPool(ctx, &g, 4)
	err := g.Wait()
	if err != nil && stream != nil {
		_ = stream.Close(context.Background())
		c.stream.Closed()
	}
	return stream, err
}

// Stop stops claiming, waits for running handlers until ctx is done, then
// cancels them (cause [ErrShutdown]) and releases their runs so that other
// workers can claim them at once, without waiting for the lease to lapse. A
// handler that ignores its context for longer than ReleaseTimeout is
// abandoned: its run is released anyway and its late result is not written.
// Leases are kept all along: the pinger stops last, once every run's end is
// written, Stop waiting at most WriteTimeout for end writes still going.
// Stop is idempotent and safe to call before Start.
func (c *engine) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *engine) stop(ctx context.Context) error {
	c.lifeMu.Lock()
	c.stopped = true
	started := c.started
	c.lifeMu.Unlock()
	if !started {
		return nil
	}
	c.unsubscribe()
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
func (c *engine) leave() {
	ctx, cancel := retry.Bounded(context.Background(), min(c.cfg.WriteTimeout, time.Second), errWriteTimeout)
	defer cancel()
	if err := c.peers.Forget(ctx, []string{c.cfg.WorkerID}, nil); err != nil {
		c.log.Debug("could not leave the consumers alive; the entry lapses", "error", err)
	}
}

// awaitRuns waits up to limit for the run goroutines still going: ones
// whose end is being written, or whose handler was abandoned (they write
// nothing once Stop released their run).
func (c *engine) awaitRuns(limit time.Duration) {
	done := make(chan struct{})
	go func() { c.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		c.log.Warn("stopping with run ends still being written; their leases will lapse", "waited", limit)
	}
}

// Running is the number of runs this consumer holds now.
func (c *engine) Running() int {
	return c.pinger.Len()
}

// Capacity is the most runs this consumer holds at once.
func (c *engine) Capacity() int { return c.cfg.Capacity }

// cancelRuns cancels this consumer's runs of the task key (it was
// cancelled); their ends are recorded as cancelled.
func (c *engine) cancelRuns(key string) {
	for _, r := range c.pinger.Snapshot() {
		if r.Key == key {
			lease.CancelRun(r, ErrCancelled)
		}
	}
}

// wake tells the claim loop that a task may have become claimable.
// Wake makes the consumer look for claimable tasks now, as a change
// stream event or its own run ends do; with ClaimDemand, call it when the
// demand rises.
func (c *engine) Wake() { c.wake() }

func (c *engine) wake() {
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

func (c *engine) emit(e Event) {
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
func (c *engine) writeCtx() (context.Context, context.CancelFunc) {
	return retry.Bounded(context.Background(), c.cfg.WriteTimeout, errWriteTimeout)
}
