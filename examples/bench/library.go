package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"

	"github.com/mscheduler/mscheduler/mscheduler"
)

type consumer = mscheduler.Consumer[params, struct{}]

// noop is the handler of the end-to-end runs.
func noop(context.Context, *mscheduler.Task[params]) (struct{}, error) { return struct{}{}, nil }

// libraryEndToEnd publishes the tasks one by one with Producer.Publish, then
// starts workers consumers, each on its own client, and waits until every
// task has succeeded.
func libraryEndToEnd(ctx context.Context, e *env, workers, round int) (runStats, error) {
	name := fmt.Sprintf("lib_w%d_r%d", workers, round)
	if err := e.freshCollection(ctx, name); err != nil {
		return runStats{}, err
	}
	cmds := newCommands()
	clients, err := e.clients(ctx, workers+1, cmds) // the last one publishes
	if err != nil {
		return runStats{}, err
	}
	defer disconnect(clients...)
	producer, err := mscheduler.NewProducer[params](clients[workers].Database(database).Collection(name), nil)
	if err != nil {
		return runStats{}, err
	}
	done := newTally(e.cfg.Tasks)
	var problems, claims atomic.Int64
	onEvent := func(ev mscheduler.Event) {
		switch ev.Kind {
		case mscheduler.EventClaimed:
			claims.Add(1)
		case mscheduler.EventSucceeded:
			done.add()
		case mscheduler.EventFailed, mscheduler.EventError, mscheduler.EventLeaseLost, mscheduler.EventExpired:
			problems.Add(1)
		}
	}
	consumers := make([]*consumer, workers)
	for w := range workers {
		consumers[w], err = mscheduler.NewConsumer(clients[w].Database(database).Collection(name), noop, &mscheduler.ConsumerConfig{
			WorkerID: fmt.Sprintf("lib-%d", w), Capacity: e.cfg.Capacity, OnEvent: onEvent, Logger: e.logger,
			ClaimSpareFor: max(e.cfg.SpareFor, mscheduler.NoClaimSpares),
		})
		if err != nil {
			return runStats{}, err
		}
	}
	defer stopConsumers(consumers)

	st := runStats{Tasks: e.cfg.Tasks}
	cmds.start()
	cpu0, cpuOK := cpuTime()
	start := time.Now()
	if err := publishOneByOne(ctx, producer, 0, e.cfg.Tasks, time.Time{}); err != nil {
		return st, err
	}
	st.Publish = time.Since(start)

	drainStart := time.Now()
	// At once, as W worker processes would: started one after the other,
	// each Start waits behind the commands of those already claiming, and
	// the last joins seconds later, moving every worker's share of the
	// tasks as it does.
	var g errgroup.Group
	for _, c := range consumers {
		g.Go(func() error { return c.Start(ctx) })
	}
	if err := g.Wait(); err != nil {
		return st, err
	}
	err = done.wait(ctx, e.cfg.Stall)
	st.Drain = time.Since(drainStart)
	st.CPU = cpuSince(cpu0, cpuOK)
	cmds.snapshot(&st)
	st.Succeeded = done.count()
	st.Problems = int(problems.Load())
	st.Reruns = int(claims.Load()) - st.Succeeded
	if err != nil {
		return st, err
	}
	if err := stopConsumers(consumers); err != nil {
		return st, err
	}
	if err := checkSucceeded(ctx, e.db.Collection(name), e.cfg.Tasks); err != nil {
		return st, err
	}
	if err := e.dropCollection(ctx, name); err != nil {
		return st, err
	}
	e.say("library,  round %d, %d×%d slots: %d tasks in %s (publish %s, drain %s)", round+1, workers, e.cfg.Capacity, st.Succeeded,
		st.total().Round(time.Millisecond), st.Publish.Round(time.Millisecond), st.Drain.Round(time.Millisecond))
	return st, nil
}

// stopConsumers stops every consumer; Stop is idempotent, so a deferred
// call after a clean stop does nothing.
func stopConsumers(consumers []*consumer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var first error
	for _, c := range consumers {
		if c == nil {
			continue
		}
		if err := c.Stop(ctx); err != nil && first == nil {
			first = fmt.Errorf("stop %s: %w", c.WorkerID(), err)
		}
	}
	return first
}

// checkSucceeded checks that the collection holds exactly n tasks, all
// succeeded: the documents must agree with the events.
func checkSucceeded(ctx context.Context, coll *mongo.Collection, n int) error {
	all, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		return err
	}
	ok, err := coll.CountDocuments(ctx, bson.D{{Key: "status", Value: mscheduler.StatusSucceeded}})
	if err != nil {
		return err
	}
	if all != int64(n) || ok != int64(n) {
		return fmt.Errorf("%s: %d tasks, %d succeeded; want %d and %d", coll.Name(), all, ok, n, n)
	}
	return nil
}

// publishOneByOne publishes tasks from..from+n-1 with one Publish each. A
// zero runAt means now.
func publishOneByOne(ctx context.Context, p *mscheduler.Producer[params], from, n int, runAt time.Time) error {
	for i := from; i < from+n; i++ {
		task := mscheduler.Task[params]{Key: taskKey(i), RunAt: runAt, Params: params{PublishedNS: time.Now().UnixNano()}}
		res, err := p.Publish(ctx, task, nil)
		if err != nil {
			return fmt.Errorf("publish %s: %w", task.Key, err)
		}
		if res.Outcome != mscheduler.PublishInserted {
			return fmt.Errorf("publish %s: outcome %s, want inserted", task.Key, res.Outcome)
		}
	}
	return nil
}

// publishMany publishes n tasks with PublishMany in batches.
func publishMany(ctx context.Context, p *mscheduler.Producer[params], n, batch int) error {
	for from := 0; from < n; from += batch {
		tasks := make([]mscheduler.Task[params], 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			tasks = append(tasks, mscheduler.Task[params]{Key: taskKey(i), Params: params{PublishedNS: time.Now().UnixNano()}})
		}
		res, err := p.PublishMany(ctx, tasks, nil)
		if err != nil {
			return fmt.Errorf("publishMany at %d: %w", from, err)
		}
		for _, r := range res {
			if r.Outcome != mscheduler.PublishInserted {
				return fmt.Errorf("publishMany %s: outcome %s, want inserted", r.Key, r.Outcome)
			}
		}
	}
	return nil
}
