package engine

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Config is a consumer's configuration as the engine runs it: every
// default applied and every value checked by the public layer
// (mscheduler.ConsumerConfig documents each field).
type Config struct {
	WorkerID    string
	Groups      []string
	Capacity    int
	Timeout     time.Duration
	Logger      *slog.Logger
	OnEvent     func(Event)
	ClaimDemand func() int

	Discovery                Discovery
	PollInterval             time.Duration
	ChangeStreamPollInterval time.Duration
	SweepInterval            time.Duration
	PollBudget               int // NoPollBudget: every consumer at its own intervals
	ClaimBatchMax            int
	ClaimBatchWindow         time.Duration // 0: no window
	ClaimSpareFor            time.Duration // 0: no spares
	TargetedClaims           bool
	PingBatchMax             int
	EndBatchMax              int
	EndBatchWindow           time.Duration // 0: no window
	ReleaseTimeout           time.Duration
	TimeoutGrace             time.Duration
	WriteTimeout             time.Duration
	RunsKept                 int
	MaxResultBytes           int
	MaxErrorBytes            int
	Retention                taskstate.Retention

	MaintenanceInterval time.Duration
	CheckInterval       time.Duration
	WriteConcern        *writeconcern.WriteConcern
	Clock               func() time.Time
	Monotonic           func() time.Duration
	ClockSyncInterval   time.Duration

	// Prepare turns a claimed task into the call of its handler: the
	// front end's typed layer.
	Prepare PrepareFunc
	// Documents is what the public package knows of task documents.
	Documents Documents
}

// Discovery is how a consumer learns of new tasks.
type Discovery string

// The ways of discovery (mscheduler.Discovery).
const (
	DiscoveryAuto         Discovery = "auto"
	DiscoveryPoll         Discovery = "poll"
	DiscoveryChangeStream Discovery = "change_stream"
)

// NoPollBudget, as Config.PollBudget, has every consumer poll and sweep
// at its own intervals however many there are.
const NoPollBudget = -1

// CallFunc runs a claimed task's handler once and returns its result as
// BSON.
type CallFunc func(ctx context.Context) (bson.RawValue, error)

// PrepareFunc turns a claimed task into the call of its handler, or says
// why the task's params cannot be given to it (the engine sets the task
// invalid then, naming params). run is the engine's: it sets Attempt
// before each call, and PlannedAt once the plan gate has passed.
type PrepareFunc func(doc *stored.Task, run *Run) (CallFunc, error)

// Documents is what the engine needs of the public package about task
// documents: the gate every document read goes through, and plans, whose
// rules the public package owns.
type Documents struct {
	// Inspect decodes a stored task and says what is wrong with it, naming
	// the field: the gate's findings, and a plan that does not compile.
	Inspect func(raw bson.Raw) (*stored.Task, *stored.Problem)
	// Advance prepares the move of a task with a plan to its next planned
	// time at a run's end, or returns nil for a task without a usable plan.
	Advance func(doc *stored.Task, started, now time.Time) *taskstate.Advance
	// FirstStart is the step of a task's plan at the first start of an
	// occurrence, under its missed-run policy and pending skips; false
	// when the task has no plan that compiles.
	FirstStart func(doc *stored.Task, now time.Time) (taskstate.Step, bool)
	// EnsureSchema brings the collection to the layout this library
	// writes, refusing a newer one.
	EnsureSchema func(ctx context.Context, coll *mongo.Collection, log *slog.Logger) error
}
