package mscheduler

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"github.com/mscheduler/mscheduler/mscheduler/internal/paramcheck"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// ProducerConfig configures a [Producer]. The zero value is ready to use.
type ProducerConfig struct {
	// Defaults are the option values of tasks that leave an option at zero.
	Defaults TaskDefaults
	// WriteConcern of every write. Defaults to majority, so that an
	// acknowledged publish survives a replica-set failover. A weaker one
	// (w:1) is faster and may lose tasks that a failover rolls back.
	WriteConcern *writeconcern.WriteConcern
	// Clock is the local wall clock and Monotonic a clock that is never
	// stepped, as in [ConsumerConfig]: times the producer writes (a default
	// run_at, a plan's start) are server times carried forward by Monotonic.
	// Default to time.Now and the runtime's monotonic clock.
	Clock     func() time.Time
	Monotonic func() time.Duration
	// Retention is how long the tasks this producer finishes (Cancel) are
	// kept; set it as the consumers' Retention. Zero fields take defaults.
	Retention Retention
	// SchemaCheckInterval is how long a producer trusts its last check of
	// the collection's schema version before its next write checks again,
	// so that a producer of an older library stops writing within it once a
	// newer one migrated the collection. Defaults to
	// [SchemaCheckIntervalDefault].
	SchemaCheckInterval time.Duration
	// ContextHeaders, when set, gives headers to add to every task published
	// with ctx, such as the trace context of the request that publishes: a
	// task's own Headers win over them key by key. It is called once per
	// Publish or PublishMany; the otel module's HeadersFromContext is one.
	ContextHeaders func(ctx context.Context) map[string]string
}

// SchemaCheckIntervalDefault is the default ProducerConfig.SchemaCheckInterval.
const SchemaCheckIntervalDefault = time.Minute

func (c *ProducerConfig) withDefaults() *ProducerConfig {
	out := ProducerConfig{}
	if c != nil {
		out = *c
	}
	out.Defaults = out.Defaults.withDefaults()
	out.SchemaCheckInterval = cmp.Or(out.SchemaCheckInterval, SchemaCheckIntervalDefault)
	out.Retention = out.Retention.withDefaults()
	if out.WriteConcern == nil {
		out.WriteConcern = writeconcern.Majority()
	}
	return &out
}

func (c *ProducerConfig) validate() error {
	if c.SchemaCheckInterval < 0 {
		return invalid("SchemaCheckInterval", "must not be negative, got %s", c.SchemaCheckInterval)
	}
	if err := c.Retention.validate("Retention."); err != nil {
		return err
	}
	return c.Defaults.options().validate("Defaults.")
}

// Producer publishes tasks with parameters of type P into one collection.
// It is safe for concurrent use.
type Producer[P any] struct {
	coll  *mongo.Collection
	cfg   *ProducerConfig
	clock *serverClock
	// schemaChecked is the monotonic time of the last write that found the
	// collection at this library's schema version (0: never); written and
	// read by every write.
	schemaChecked atomic.Int64
	// params checks the params of each publish: the collection's params
	// schema as of the last schema check (nil: none). Written by the
	// write that checks, read by every publish.
	params atomic.Pointer[paramcheck.Checker]
}

// NewProducer returns a producer for coll. It does no I/O.
func NewProducer[P any](coll *mongo.Collection, cfg *ProducerConfig) (*Producer[P], error) {
	if coll == nil {
		return nil, invalid("coll", "must not be nil")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Producer[P]{
		coll:  coll.Clone(options.Collection().SetWriteConcern(c.WriteConcern)),
		cfg:   c,
		clock: newServerClock(c.Clock, c.Monotonic, ClockSyncIntervalDefault),
	}, nil
}

// PublishOpts says what to do when a task with the same key exists. With no
// option set (or nil opts) an existing task is left unchanged.
type PublishOpts struct {
	// UpdateParams replaces the params of an existing task.
	UpdateParams bool
	// MoveRunAt sets the run_at of an existing task to the task's RunAt.
	MoveRunAt bool
	// SkipRunning leaves a task that has a run going untouched by
	// UpdateParams and MoveRunAt.
	SkipRunning bool
	// ResetFinished makes a succeeded, failed, finished or cancelled task with no run
	// going pending again, with the published params, options and plan (a
	// plan starts over from the publish time), so that it runs again. Its
	// run history is kept.
	ResetFinished bool
}

// PublishOutcome says what a publish did to one key.
type PublishOutcome string

const (
	PublishInserted  PublishOutcome = "inserted"
	PublishUpdated   PublishOutcome = "updated"
	PublishUnchanged PublishOutcome = "unchanged"
)

// PublishResult is the outcome for one key.
type PublishResult struct {
	Key     string
	Outcome PublishOutcome
}

// Publish inserts the task, or applies opts to the existing task with the
// same key. It is idempotent by key. An invalid task returns an
// *InvalidError naming the field, and nothing is written.
func (p *Producer[P]) Publish(ctx context.Context, task Task[P], opts *PublishOpts) (PublishResult, error) {
	res, err := p.publish(ctx, []Task[P]{task}, opts, "")
	if err != nil {
		return PublishResult{}, err
	}
	return res[0], nil
}

// PublishMany publishes tasks in one insert, plus one bulk update of the
// keys that already existed when opts asks for updates (and one read with
// ResetFinished), returning one result per task in order. Every task is validated first: an
// invalid one (named as tasks[i].Field) or a key given twice fails the whole
// call and nothing is written.
func (p *Producer[P]) PublishMany(ctx context.Context, tasks []Task[P], opts *PublishOpts) ([]PublishResult, error) {
	return p.publish(ctx, tasks, opts, "tasks[%d].")
}

func (p *Producer[P]) publish(ctx context.Context, tasks []Task[P], opts *PublishOpts, prefixFormat string) ([]PublishResult, error) {
	if opts == nil {
		opts = &PublishOpts{}
	}
	if err := p.clock.Ensure(ctx, p.coll.Database()); err != nil {
		return nil, err
	}
	if err := p.checkSchema(ctx); err != nil {
		return nil, err
	}
	docs, err := p.buildDocs(tasks, p.contextHeaders(ctx), prefixFormat)
	if err != nil {
		return nil, err
	}
	if err := p.checkParams(ctx, docs, opts, prefixFormat); err != nil {
		return nil, err
	}
	if opts.MoveRunAt {
		for i, d := range docs {
			if d.Plan != nil {
				return nil, invalid(fieldName(prefixFormat, i, "Plan"), "MoveRunAt does not apply to a task with a plan: the plan sets run_at")
			}
		}
	}
	if len(docs) == 0 {
		return nil, nil
	}
	outcomes, existing, err := p.insertNew(ctx, docs)
	if err != nil {
		return nil, err
	}
	resettable := map[string]bool{}
	if len(existing) > 0 && (opts.UpdateParams || opts.MoveRunAt || opts.ResetFinished) {
		if resettable, err = p.updateExisting(ctx, docs, existing, opts, outcomes); err != nil {
			return nil, err
		}
	}
	// A task due later is found by the consumers' next look: waking them
	// for each one would cost a claim per publish and find nothing.
	if slices.ContainsFunc(docs, func(d *taskDoc) bool { return !d.RunAt.After(p.clock.Now()) }) {
		localwake.Wake(p.coll)
	}
	results := make([]PublishResult, len(docs))
	for i, d := range docs {
		outcome := outcomes[i]
		if outcome == publishMatched {
			outcome = PublishUnchanged
			if resettable[d.Key] || opts.UpdateParams || opts.MoveRunAt {
				outcome = PublishUpdated
			}
		}
		results[i] = PublishResult{Key: d.Key, Outcome: outcome}
	}
	return results, nil
}

// checkSchema brings the collection to this library's schema version, or
// refuses a newer one, and reads its params schema, before the producer's
// first write and again once SchemaCheckInterval has passed since the last
// check.
func (p *Producer[P]) checkSchema(ctx context.Context) error {
	at := time.Duration(p.schemaChecked.Load())
	if at != 0 && p.clock.Mono()-at < p.cfg.SchemaCheckInterval {
		return nil
	}
	if err := ensureSchema(ctx, p.coll, slog.Default()); err != nil {
		return err
	}
	params, err := loadParamsChecker(ctx, p.coll)
	if err != nil {
		return err
	}
	p.params.Store(params)
	p.schemaChecked.Store(int64(max(p.clock.Mono(), 1)))
	return nil
}

// contextHeaders calls ContextHeaders, if set.
func (p *Producer[P]) contextHeaders(ctx context.Context) map[string]string {
	if p.cfg.ContextHeaders == nil {
		return nil
	}
	return p.cfg.ContextHeaders(ctx)
}

// withHeaders returns t with the context's headers added under its own.
func withHeaders[P any](t *Task[P], fromCtx map[string]string) *Task[P] {
	if len(fromCtx) == 0 {
		return t
	}
	out := *t
	out.Headers = maps.Clone(fromCtx)
	maps.Copy(out.Headers, t.Headers)
	return &out
}

func (p *Producer[P]) buildDocs(tasks []Task[P], fromCtx map[string]string, prefixFormat string) ([]*taskDoc, error) {
	now := p.clock.Now()
	docs := make([]*taskDoc, len(tasks))
	seen := make(map[string]int, len(tasks))
	for i := range tasks {
		prefix := ""
		if prefixFormat != "" {
			prefix = fmt.Sprintf(prefixFormat, i)
		}
		d, err := newTaskDoc(withHeaders(&tasks[i], fromCtx), p.cfg.Defaults, now, prefix)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[d.Key]; dup {
			return nil, invalid(prefix+"Key", "%q is also the key of tasks[%d]", d.Key, j)
		}
		seen[d.Key] = i
		taskstate.Fresh(d, planDone(d), now, p.cfg.Retention.policy())
		docs[i] = d
	}
	return docs, nil
}

// fieldName names a field of tasks[i] as publish reports it.
func fieldName(prefixFormat string, i int, field string) string {
	if prefixFormat == "" {
		return field
	}
	return fmt.Sprintf(prefixFormat, i) + field
}

// insertNew inserts every task in one unordered insert: most publishes are
// of new keys, and an insert is the cheapest write there is. A key that
// exists fails on the primary key; such tasks are returned as existing,
// their outcome still unchanged.
func (p *Producer[P]) insertNew(ctx context.Context, docs []*taskDoc) ([]PublishOutcome, []int, error) {
	outcomes := make([]PublishOutcome, len(docs))
	for i := range outcomes {
		outcomes[i] = PublishInserted
	}
	var err error
	if len(docs) == 1 {
		_, err = p.coll.InsertOne(ctx, docs[0])
		if mongo.IsDuplicateKeyError(err) {
			outcomes[0] = PublishUnchanged
			return outcomes, []int{0}, nil
		}
	} else {
		_, err = p.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	}
	duplicates, err := query.DuplicateIndexes(err)
	if err != nil {
		return nil, nil, fmt.Errorf("mscheduler: publish: %w", err)
	}
	var existing []int
	for i := range docs {
		if duplicates[i] {
			outcomes[i] = PublishUnchanged
			existing = append(existing, i)
		}
	}
	return outcomes, existing, nil
}

// updateExisting applies opts to the tasks of docs that already existed,
// in one bulk write (plus one read with ResetFinished), setting their
// outcomes. It returns the keys that were reset.
func (p *Producer[P]) updateExisting(ctx context.Context, docs []*taskDoc, existing []int, opts *PublishOpts, outcomes []PublishOutcome) (map[string]bool, error) {
	subset := make([]*taskDoc, len(existing))
	for j, i := range existing {
		subset[j] = docs[i]
	}
	resettable := map[string]bool{}
	var err error
	if opts.ResetFinished {
		if resettable, err = p.findResettable(ctx, subset); err != nil {
			return nil, err
		}
	}
	models := make([]mongo.WriteModel, len(subset))
	for j, d := range subset {
		if resettable[d.Key] {
			models[j] = resetModel(d)
		} else {
			models[j] = upsertModel(d, opts)
		}
	}
	got, err := p.writeUpserts(ctx, models, subset)
	if err != nil {
		return nil, err
	}
	for j, i := range existing {
		outcomes[i] = got[j]
	}
	return resettable, nil
}

// findResettable returns the keys among docs whose task is finished with no
// run going. The reset itself stays fenced on those conditions.
func (p *Producer[P]) findResettable(ctx context.Context, docs []*taskDoc) (map[string]bool, error) {
	keys := make([]string, len(docs))
	for i, d := range docs {
		keys[i] = d.Key
	}
	found, err := query.FindAll(ctx, p.coll, bson.D{
		{Key: fID, Value: bson.D{{Key: "$in", Value: keys}}},
		{Key: fStatus, Value: op("$in", taskstate.FinalStatuses)},
		{Key: fRunning, Value: 0},
	}, nil, bson.D{{Key: fID, Value: 1}}, len(keys))
	if err != nil {
		return nil, fmt.Errorf("mscheduler: find finished tasks: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, raw := range found {
		if key, ok := raw.Lookup(fID).StringValueOK(); ok {
			out[key] = true
		}
	}
	return out, nil
}

// publishMatched is the internal outcome of an upsert that matched an
// existing task; publish turns it into updated or unchanged.
const publishMatched PublishOutcome = "matched"

// writeUpserts runs every model as an upsert in one unordered bulk write. An
// upsert whose filter excludes the existing task (a running task with
// SkipRunning, say) tries to insert and fails on the unique key index: that
// task is unchanged. A duplicate key can also come from a concurrent publish
// of the same new key, so such ops are tried once more before being called
// unchanged.
//
// Inserts are recognized by the upserted _id (the key), not by the op index
// the server reports, which not every server reports alike.
func (p *Producer[P]) writeUpserts(ctx context.Context, models []mongo.WriteModel, docs []*taskDoc) ([]PublishOutcome, error) {
	outcomes := make([]PublishOutcome, len(models))
	pending := make([]int, len(models))
	for i := range pending {
		pending[i] = i
	}
	for try := 0; try < 2 && len(pending) > 0; try++ {
		batch := make([]mongo.WriteModel, len(pending))
		for j, i := range pending {
			batch[j] = models[i]
		}
		res, err := p.coll.BulkWrite(ctx, batch, options.BulkWrite().SetOrdered(false))
		duplicates, err := query.DuplicateIndexes(err)
		if err != nil {
			return nil, fmt.Errorf("mscheduler: publish: %w", err)
		}
		upserted := map[string]bool{}
		for _, id := range res.UpsertedIDs {
			if key, ok := id.(string); ok {
				upserted[key] = true
			}
		}
		var retry []int
		for j, i := range pending {
			switch {
			case duplicates[j]:
				outcomes[i] = PublishUnchanged
				retry = append(retry, i)
			case upserted[docs[i].Key]:
				outcomes[i] = PublishInserted
			default:
				outcomes[i] = publishMatched
			}
		}
		pending = retry
	}
	return outcomes, nil
}

// upsertModel applies opts to a task that exists (see taskstate.Publish).
func upsertModel(d *taskDoc, opts *PublishOpts) mongo.WriteModel {
	filter, update := taskstate.Publish(d, insertFields(d), opts.UpdateParams, opts.MoveRunAt, opts.SkipRunning)
	return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update).SetUpsert(true)
}

// resetModel makes a finished task pending again with the published params
// and options (see taskstate.Reset).
func resetModel(d *taskDoc) mongo.WriteModel {
	filter, update := taskstate.Reset(d, insertFields(d))
	return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update).SetUpsert(true)
}

// insertFields is the document of a new task as update fields.
func insertFields(d *taskDoc) bson.D {
	raw, err := bson.Marshal(d)
	if err != nil {
		panic(fmt.Sprintf("mscheduler: encode task document: %v", err)) // params are already encoded
	}
	var full bson.D
	if err := bson.Unmarshal(raw, &full); err != nil {
		panic(fmt.Sprintf("mscheduler: decode task document: %v", err))
	}
	return full
}
