package mscheduler

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
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

// PollBudgetDefault is the default ConsumerConfig.PollBudget.
const PollBudgetDefault = 2

// NoPollBudget, as ConsumerConfig.PollBudget, has every consumer poll and
// sweep at its own intervals however many there are.
const NoPollBudget = engine.NoPollBudget

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
	// as the HTTP gateway does. Call [Consumer.Wake] when it rises. It is
	// called from the consumer's goroutines (its claim loop, its
	// database's shared poll): it must be safe for concurrent use, and
	// quick. Defaults to none: claims fill the free slots.
	ClaimDemand func() int

	// The fields below tune discovery, claims, batches, leases, writes and
	// maintenance for load and for the server; their defaults suit most
	// deployments (see the README's "Consumers" and "Guarantees").

	// Discovery defaults to [DiscoveryAuto].
	Discovery Discovery
	// PollInterval is how often the consumer looks for claimable tasks when
	// it has free slots and no change stream, with ±20% jitter so that
	// workers do not poll in step: by the one poll its process sends for
	// all the task collections of the database, or, while that poll
	// fails, by its own. Defaults to [PollIntervalDefault].
	PollInterval time.Duration
	// ChangeStreamPollInterval is the consumer's own fallback poll while a
	// change stream, or its database's shared poll, tells it of new work.
	// Defaults to [ChangeStreamPollIntervalDefault].
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
	// Clock stays nil when not given, as Monotonic does: the consumers of
	// a client that keep both share one measure of the server's clock
	// (nil reads time.Now).
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
		if reason := groupNameProblem(g); reason != "" {
			return invalid(fmt.Sprintf("Groups[%d]", i), "%s", reason)
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
	eng *engine.Engine
}

// NewConsumer returns a consumer of coll that runs handler. It does no I/O.
func NewConsumer[P, R any](coll *mongo.Collection, handler Handler[P, R], cfg *ConsumerConfig) (*Consumer[P, R], error) {
	if handler == nil {
		return nil, invalid("handler", "must not be nil")
	}
	if coll == nil {
		return nil, invalid("coll", "must not be nil")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Consumer[P, R]{eng: engine.New(coll, c.engineConfig(typedPrepare(handler, c.Middleware)))}, nil
}

// engineConfig is the configuration the engine runs, c's defaults
// applied and checked; prepare is the typed layer's.
func (c *ConsumerConfig) engineConfig(prepare engine.PrepareFunc) *engine.Config {
	return &engine.Config{
		WorkerID: c.WorkerID, Groups: c.Groups, Capacity: c.Capacity, Timeout: c.Timeout,
		Logger: c.Logger, OnEvent: c.OnEvent, ClaimDemand: c.ClaimDemand,
		Discovery: engine.Discovery(c.Discovery), PollInterval: c.PollInterval,
		ChangeStreamPollInterval: c.ChangeStreamPollInterval, SweepInterval: c.SweepInterval,
		PollBudget: c.PollBudget, ClaimBatchMax: c.ClaimBatchMax, ClaimBatchWindow: c.ClaimBatchWindow,
		ClaimSpareFor: c.ClaimSpareFor, TargetedClaims: c.TargetedClaims, PingBatchMax: c.PingBatchMax,
		EndBatchMax: c.EndBatchMax, EndBatchWindow: c.EndBatchWindow, ReleaseTimeout: c.ReleaseTimeout,
		TimeoutGrace: c.TimeoutGrace, WriteTimeout: c.WriteTimeout, RunsKept: c.RunsKept,
		MaxResultBytes: c.MaxResultBytes, MaxErrorBytes: c.MaxErrorBytes, Retention: c.Retention.policy(),
		MaintenanceInterval: c.MaintenanceInterval, CheckInterval: c.CheckInterval,
		WriteConcern: c.WriteConcern, Clock: c.Clock, Monotonic: c.Monotonic, ClockSyncInterval: c.ClockSyncInterval,
		Prepare:   prepare,
		Documents: documents,
	}
}

// documents is what the engine asks of this package about task documents.
var documents = engine.Documents{
	Inspect:      inspectTask,
	Advance:      newPlanAdvance,
	FirstStart:   firstStartStep,
	EnsureSchema: ensureSchema,
}

// Start checks the collection's schema version (see [EnsureIndexes]: a
// newer one is refused, an older one migrated), measures the server clock,
// opens the change stream if the server has one, and starts claiming in
// the background. ctx bounds only this start-up; the consumer runs until
// Stop.
func (c *Consumer[P, R]) Start(ctx context.Context) error { return c.eng.Start(ctx) }

// Stop stops claiming, waits for running handlers until ctx is done, then
// cancels them (cause [ErrShutdown]) and releases their runs so that other
// workers can claim them at once, without waiting for the lease to lapse. A
// handler that ignores its context for longer than ReleaseTimeout is
// abandoned: its run is released anyway and its late result is not written.
// Leases are kept all along: the pinger stops last, once every run's end is
// written, Stop waiting at most WriteTimeout for end writes still going.
// Stop is idempotent and safe to call before Start.
func (c *Consumer[P, R]) Stop(ctx context.Context) error { return c.eng.Stop(ctx) }

// WorkerID is the id this consumer claims runs under.
func (c *Consumer[P, R]) WorkerID() string { return c.eng.WorkerID() }

// ClockOffset is the last measured offset of the server's clock from the
// local one.
func (c *Consumer[P, R]) ClockOffset() time.Duration { return c.eng.ClockOffset() }

// Running is the number of runs this consumer holds now.
func (c *Consumer[P, R]) Running() int { return c.eng.Running() }

// Capacity is the most runs this consumer holds at once.
func (c *Consumer[P, R]) Capacity() int { return c.eng.Capacity() }

// MaxResultBytes is the largest encoded result this consumer stores, its
// configuration's default applied: a front end that receives results from
// elsewhere (the HTTP gateway) refuses a larger one before it reaches the
// run's end, which would fail the run.
func (c *Consumer[P, R]) MaxResultBytes() int { return c.eng.MaxResultBytes() }

// Holding is how many slots this consumer has taken: the runs it holds,
// until their ends are written, and, while a claim is under way, every
// slot that claim is for. It is at least Running.
func (c *Consumer[P, R]) Holding() int { return c.eng.Holding() }

// Wake makes the consumer look for claimable tasks now, as a change
// stream event or its own run ends do; with ClaimDemand, call it when the
// demand rises.
func (c *Consumer[P, R]) Wake() { c.eng.Wake() }

// ClaimNow makes the consumer look for claimable tasks now, as Wake does,
// and returns once a look that began after the call has ended (its claims
// made and their runs announced with EventClaimed), or ctx is done. With
// ClaimDemand, it is for a caller that must know what is claimable now,
// as the HTTP gateway's take that does not wait.
func (c *Consumer[P, R]) ClaimNow(ctx context.Context) error { return c.eng.ClaimNow(ctx) }

// LookEnded returns once the consumer is not looking for claimable tasks
// (at once if it is not), or ctx is done: the claims of a look going on
// are made and announced. With ClaimDemand, a caller that hands runs on
// waits for it before it answers with fewer runs than were asked for, so
// that the runs that look claims for it are not left to no one.
func (c *Consumer[P, R]) LookEnded(ctx context.Context) error { return c.eng.LookEnded(ctx) }

// Pressure is what a consumer knows of the server's load, from its own
// commands: Limit, how many runs it may hold now (Capacity when the server
// answers as fast as it did, less when it slowed down, 0 while a claim and
// its first ping would not fit in the shortest lease even stretched to 30 s:
// short of that, runs get a longer lease instead); Latency, the recent
// average round trip of its commands, and Baseline, the lowest of the last
// 30 s; HeldBack, the free slots left unclaimed because of the limit;
// Retries, the commands sent again after a failure, and RetriesWaited,
// those of them that waited for the retry budget.
type Pressure = engine.Pressure

// Pressure reports what the consumer knows of the server's load.
func (c *Consumer[P, R]) Pressure() Pressure { return c.eng.Pressure() }

// Abandoned is the number of handler goroutines this consumer gave up on
// (they ignored their cancelled context) that have not returned yet: a
// count above zero is a leak to look into.
func (c *Consumer[P, R]) Abandoned() int { return c.eng.Abandoned() }
