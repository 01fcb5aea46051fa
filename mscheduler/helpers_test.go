package mscheduler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashWorkerEnv) != "" {
		runCrashWorker()
	}
	os.Exit(mschedulertest.Main(m))
}

// waitTimeout bounds the waits that do not go through Events.
const waitTimeout = mschedulertest.WaitTimeout

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// quietLog discards logs unless MSCHEDULER_TEST_LOG is set.
var quietLog = func() *slog.Logger {
	if os.Getenv("MSCHEDULER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// fastConfig is a consumer config with short intervals for tests.
func fastConfig(workerID string, ev *mschedulertest.Events) *mscheduler.ConsumerConfig {
	return &mscheduler.ConsumerConfig{
		WorkerID:      workerID,
		PollInterval:  50 * time.Millisecond,
		SweepInterval: time.Second,
		Logger:        quietLog,
		OnEvent:       ev.Record,
	}
}

// startConsumer starts a consumer and stops it at the end of the test.
func startConsumer[P, R any](t *testing.T, coll *mongo.Collection, h mscheduler.Handler[P, R], cfg *mscheduler.ConsumerConfig) *mscheduler.Consumer[P, R] {
	t.Helper()
	c, err := mscheduler.NewConsumer(coll, h, cfg)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func newProducer[P any](t *testing.T, coll *mongo.Collection, cfg *mscheduler.ProducerConfig) *mscheduler.Producer[P] {
	t.Helper()
	if err := mscheduler.EnsureIndexes(ctxT(t), coll); err != nil {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	p, err := mscheduler.NewProducer[P](coll, cfg)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	return p
}

// taskDoc reads a task document for assertions.
type storedRun struct {
	RunID    string        `bson:"run_id"`
	WorkerID string        `bson:"worker_id"`
	Outcome  string        `bson:"outcome"`
	Attempts int           `bson:"attempts"`
	Error    string        `bson:"error"`
	Result   bson.RawValue `bson:"result"`
	Started  time.Time     `bson:"started"`
	Finished time.Time     `bson:"finished"`
}

type storedTask struct {
	Key        string         `bson:"key"`
	Status     string         `bson:"status"`
	Params     bson.RawValue  `bson:"params"`
	RunAt      time.Time      `bson:"run_at"`
	Free       int            `bson:"free"`
	Running    int            `bson:"running"`
	Succeeded  int            `bson:"succeeded"`
	FailedRuns int            `bson:"failed_runs"`
	Holders    map[string]any `bson:"holders"`
	DoneBy     []string       `bson:"done_by"`
	Runs       []storedRun    `bson:"runs"`
	NextExpiry *time.Time     `bson:"next_expiry"`
}

func readTask(t *testing.T, coll *mongo.Collection, key string) storedTask {
	t.Helper()
	var st storedTask
	if err := coll.FindOne(context.Background(), bson.D{{Key: "key", Value: key}}).Decode(&st); err != nil {
		t.Fatalf("read task %q: %v", key, err)
	}
	return st
}

func countDocs(t *testing.T, coll *mongo.Collection, filter bson.D) int64 {
	t.Helper()
	n, err := coll.CountDocuments(context.Background(), filter)
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// setFields edits a task by hand, as an operator would in mongosh.
func setFields(t *testing.T, coll *mongo.Collection, key string, set bson.D) {
	t.Helper()
	res, err := coll.UpdateOne(context.Background(), bson.D{{Key: "key", Value: key}}, bson.D{{Key: "$set", Value: set}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("edit task %q: %v (matched %v)", key, err, res)
	}
}

// wantInvalid fails the test unless err is an *InvalidError on field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *mscheduler.InvalidError
	if !errors.As(err, &ie) || ie.Field != field || !errors.Is(err, mscheduler.ErrInvalid) {
		t.Fatalf("err = %v, want an InvalidError on %s", err, field)
	}
}
