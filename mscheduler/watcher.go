package mscheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// watchState is written by the watcher and read by the claim loop.
type watchState struct {
	open atomic.Bool // a change stream is delivering events
}

// reopenDelay is the pause before reopening a failed change stream.
const reopenDelay = time.Second

// streamPipeline passes only the changes that can make a slot claimable: a
// new task, a freed slot, a moved run_at, a changed concurrency. Pings and
// claims that leave no slot free do not wake the workers.
func streamPipeline() mongo.Pipeline {
	updated := func(field string) bson.D {
		return bson.D{{Key: "updateDescription.updatedFields." + field, Value: op("$exists", true)}}
	}
	return mongo.Pipeline{{{Key: "$match", Value: op("$or", bson.A{
		op("operationType", op("$in", bson.A{"insert", "replace"})),
		bson.D{{Key: "updateDescription.updatedFields." + fFree, Value: op("$gt", 0)}},
		updated(fRunAt),
		updated(fConcurrency),
		updated(fStatus),
	})}}}
}

// openStream opens the change stream unless Discovery says poll. With
// DiscoveryAuto, a server without change streams (a standalone server, the
// development server) means polling; with DiscoveryChangeStream it is an
// error.
func (c *engine) openStream(ctx context.Context) (*mongo.ChangeStream, error) {
	if c.cfg.Discovery == DiscoveryPoll {
		return nil, nil
	}
	cs, err := c.coll.Watch(ctx, streamPipeline())
	if err != nil {
		if c.cfg.Discovery == DiscoveryChangeStream {
			return nil, fmt.Errorf("mscheduler: open change stream (Discovery is change_stream): %w", err)
		}
		c.log.Info("no change streams on this server; polling", "poll_interval", c.cfg.PollInterval.String(), "reason", err)
		return nil, nil
	}
	c.watching.open.Store(true)
	return cs, nil
}

// watchLoop wakes the claim loop on every relevant change. After an error
// it resumes from the last token; if the server cannot resume (the token
// fell out of its oplog), it opens a new stream and wakes the claim loop so
// that the changes it missed are found by a query.
func (c *engine) watchLoop(ctx context.Context, cs *mongo.ChangeStream) {
	defer func() { c.watching.open.Store(false) }()
	for {
		for cs.Next(ctx) {
			c.onChange(cs.Current)
		}
		token := cs.ResumeToken()
		err := cs.Err()
		_ = cs.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		c.watching.open.Store(false)
		c.loopError(ctx, fmt.Errorf("mscheduler: change stream: %w", err))
		c.wake()
		if cs = c.reopenStream(ctx, token); cs == nil {
			return
		}
		c.watching.open.Store(true)
		c.wake()
	}
}

// onChange wakes the claim loop, and cancels this worker's runs of a task
// that was cancelled.
func (c *engine) onChange(event bson.Raw) {
	if status, _ := event.Lookup("updateDescription", "updatedFields", fStatus).StringValueOK(); Status(status) == StatusCancelled {
		if key, ok := event.Lookup("documentKey", fID).StringValueOK(); ok {
			c.cancelRuns(key)
		}
	}
	c.wake()
}

func (c *engine) reopenStream(ctx context.Context, token bson.Raw) *mongo.ChangeStream {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reopenDelay):
		}
		opts := options.ChangeStream()
		if token != nil {
			opts.SetResumeAfter(token)
		}
		cs, err := c.coll.Watch(ctx, streamPipeline(), opts)
		if err == nil {
			return cs
		}
		c.loopError(ctx, fmt.Errorf("mscheduler: reopen change stream: %w", err))
		token = nil // a token the server rejected is not tried again
	}
}
