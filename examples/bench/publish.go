package main

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// publishResult is how long each way of writing cfg.Publish new tasks took,
// added up over the rounds.
type publishResult struct {
	Tasks, Batch  int // per round
	Rounds        int
	OneByOne      time.Duration // Producer.Publish, one call per task
	Many          time.Duration // Producer.PublishMany, in batches
	RawInsertOne  time.Duration // insertOne, one per task
	RawUpsertOne  time.Duration // update upserting by _id, one per task: Publish's write without the library
	RawInsertMany time.Duration // insertMany, in batches
	RawUpsertMany time.Duration // bulkWrite of upserts by _id, in batches: PublishMany's write without the library
}

// publishPhase writes cfg.Publish new tasks into a fresh collection in each
// of six ways, each on its own client, cfg.Rounds times, in reverse order
// every other round.
func publishPhase(ctx context.Context, e *env) (publishResult, error) {
	n, batch := e.cfg.Publish, e.cfg.Batch
	res := publishResult{Tasks: n, Batch: batch, Rounds: e.cfg.Rounds}
	steps := []struct {
		name string
		into *time.Duration
		run  func(ctx context.Context, client *mongo.Client, coll string) error
	}{
		{"raw insertOne", &res.RawInsertOne, func(ctx context.Context, c *mongo.Client, coll string) error {
			return rawInsertOne(ctx, e, rawCollection(c, coll), 0, n, time.Time{})
		}},
		{"Publish", &res.OneByOne, func(ctx context.Context, c *mongo.Client, coll string) error {
			p, err := mscheduler.NewProducer[params](c.Database(database).Collection(coll), nil)
			if err != nil {
				return err
			}
			return publishOneByOne(ctx, p, 0, n, time.Time{})
		}},
		{"raw upsert", &res.RawUpsertOne, func(ctx context.Context, c *mongo.Client, coll string) error {
			return rawUpsertOne(ctx, e, rawCollection(c, coll), n)
		}},
		{"raw insertMany", &res.RawInsertMany, func(ctx context.Context, c *mongo.Client, coll string) error {
			return rawInsertMany(ctx, e, rawCollection(c, coll), n, batch, time.Time{})
		}},
		{"PublishMany", &res.Many, func(ctx context.Context, c *mongo.Client, coll string) error {
			p, err := mscheduler.NewProducer[params](c.Database(database).Collection(coll), nil)
			if err != nil {
				return err
			}
			return publishMany(ctx, p, n, batch)
		}},
		{"raw bulk upsert", &res.RawUpsertMany, func(ctx context.Context, c *mongo.Client, coll string) error {
			return rawBulkUpsert(ctx, e, rawCollection(c, coll), n, batch)
		}},
	}
	for r := range e.cfg.Rounds {
		for j := range steps {
			i := j
			if r%2 == 1 {
				i = len(steps) - 1 - j
			}
			s := steps[i]
			d, err := timePublish(ctx, e, fmt.Sprintf("publish_%d_r%d", i, r), s.run)
			if err != nil {
				return res, fmt.Errorf("%s: %w", s.name, err)
			}
			*s.into += d
			e.say("publishing, round %d: %s, %d tasks in %s (%.0f tasks/s)", r+1, s.name, n, d.Round(time.Millisecond), perSecond(n, d))
		}
	}
	return res, nil
}

// timePublish runs one way of publishing on a fresh collection and a fresh
// client, and checks that every task was written.
func timePublish(ctx context.Context, e *env, coll string, run func(context.Context, *mongo.Client, string) error) (time.Duration, error) {
	if err := e.freshCollection(ctx, coll); err != nil {
		return 0, err
	}
	clients, err := e.clients(ctx, 1, newCommands())
	if err != nil {
		return 0, err
	}
	defer disconnect(clients...)
	client := clients[0]
	start := time.Now()
	if err := run(ctx, client, coll); err != nil {
		return 0, err
	}
	d := time.Since(start)
	got, err := e.db.Collection(coll).CountDocuments(ctx, bson.D{{Key: "status", Value: mscheduler.StatusPending}})
	if err != nil {
		return 0, err
	}
	if got != int64(e.cfg.Publish) {
		return 0, fmt.Errorf("%d pending tasks written, want %d", got, e.cfg.Publish)
	}
	return d, e.dropCollection(ctx, coll)
}
