package main

// The cost of waiting: what one process serving N task collections of a
// database sends the server while there is nothing to do. Each collection
// has one consumer (Capacity 4, the default configuration otherwise) on
// the process's one client, as a worker process has them; nothing is
// published. After a settle time the commands that client sends over a
// window are counted by name with the command monitor.
//
// The raw limit is what the least a poller can do costs: one find for a
// due task per collection per default PollInterval. It runs beside the
// consumers, in the same windows, on a client of its own whose commands
// are counted apart: its rate is set by its ticker alone, and running it
// at the same time keeps the phase as short as the library's side.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// idleCapacity is the idle consumers' Capacity, whatever -capacity says,
// so that the figure is the one the targets speak of in every run.
const idleCapacity = 4

// idleResult holds the commands sent by idle consumers and by the raw
// poller beside them, one count per -idle collection count.
type idleResult struct {
	Settle, Window time.Duration // as configured

	Poll   []idleCount // DiscoveryPoll
	Stream []idleCount // DiscoveryChangeStream; nil with StreamNA
	// StreamNA says why there are no change-stream figures.
	StreamNA string
}

// idleCount is one window of N idle collections.
type idleCount struct {
	Collections int
	Window      time.Duration    // as measured, from the start of counting to its end
	Library     map[string]int64 // the consumers' client, by command name
	Raw         map[string]int64 // the raw poller's client, by command name
}

func (c idleCount) libPerSec() float64 { return perSecondOf(sumCounts(c.Library), c.Window) }
func (c idleCount) rawPerSec() float64 { return perSecondOf(sumCounts(c.Raw), c.Window) }

// rawShare is the raw poller's rate over its ticker's: below 1 the server
// did not answer its finds within a PollInterval, and every figure of the
// window, the library's too, is bound by the server rather than by the
// poller or the library.
func (c idleCount) rawShare() float64 {
	return c.rawPerSec() / (float64(c.Collections) / mscheduler.PollIntervalDefault.Seconds())
}

func sumCounts(counts map[string]int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

func perSecondOf(n int64, d time.Duration) float64 { return perSecond(int(n), d) }

func idlePhase(ctx context.Context, e *env) (idleResult, error) {
	res := idleResult{Settle: e.cfg.IdleSettle, Window: e.cfg.IdleWindow}
	for _, n := range e.cfg.IdleCollections {
		c, err := idleRun(ctx, e, n, mscheduler.DiscoveryPoll)
		if err != nil {
			return res, fmt.Errorf("%d collections, polling: %w", n, err)
		}
		res.Poll = append(res.Poll, c)
	}
	for _, n := range e.cfg.IdleCollections {
		c, err := idleRun(ctx, e, n, mscheduler.DiscoveryChangeStream)
		if errors.Is(err, errNoStreams) {
			res.Stream, res.StreamNA = nil, "n/a (no change streams)"
			e.say("idle: change streams: %v", err)
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("%d collections, change streams: %w", n, err)
		}
		res.Stream = append(res.Stream, c)
	}
	return res, nil
}

// idleRun starts a consumer with the given discovery on each of n fresh
// collections, all on one client, and the raw poller of the same
// collections on another; lets them settle; and counts what each client
// sends over the window. With DiscoveryChangeStream on a server without
// change streams it returns errNoStreams.
func idleRun(ctx context.Context, e *env, n int, discovery mscheduler.Discovery) (idleCount, error) {
	res := idleCount{Collections: n}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("idle_%s_n%d_%02d", discovery, n, i)
		if err := e.freshCollection(ctx, names[i]); err != nil {
			return res, err
		}
	}
	libCmds, rawCmds := newCommands(), newCommands()
	clients, err := e.clients(ctx, 1, libCmds)
	if err != nil {
		return res, err
	}
	defer disconnect(clients...)
	rawClients, err := e.clients(ctx, 1, rawCmds)
	if err != nil {
		return res, err
	}
	defer disconnect(rawClients...)

	mode := discoveryName(discovery)
	e.say("idle: %d collections, %s: starting %d consumers", n, mode, n)
	consumers, err := startIdleConsumers(ctx, e, clients[0], names, discovery)
	defer stopConsumers(consumers)
	if err != nil {
		return res, errors.Join(err, stopConsumers(consumers), e.dropTaskCollections(ctx, names))
	}
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	polls, pollCtx := errgroup.WithContext(pollCtx)
	for i, name := range names {
		// Spread over the interval, as the consumers' jitter spreads theirs.
		offset := time.Duration(i) * mscheduler.PollIntervalDefault / time.Duration(n)
		coll := rawCollection(rawClients[0], name)
		polls.Go(func() error { return rawIdlePoll(pollCtx, e.cfg.Stall, coll, offset) })
	}

	if err := sleepCtx(pollCtx, e.cfg.IdleSettle); err != nil {
		return res, errors.Join(err, polls.Wait())
	}
	libCmds.start()
	rawCmds.start()
	begin := time.Now()
	if err := sleepCtx(pollCtx, e.cfg.IdleWindow); err != nil {
		return res, errors.Join(err, polls.Wait())
	}
	var lib, raw runStats
	libCmds.snapshot(&lib)
	rawCmds.snapshot(&raw)
	res.Window = time.Since(begin)
	res.Library, res.Raw = lib.Commands, raw.Commands

	stopPolling()
	if err := polls.Wait(); err != nil {
		return res, fmt.Errorf("raw poller: %w", err)
	}
	if err := stopConsumers(consumers); err != nil {
		return res, err
	}
	e.say("idle: %d collections, %s: library %.2f commands/s (%.3f per collection; %s), raw %.2f (%.2f of its ticker's)", n, mode,
		res.libPerSec(), res.libPerSec()/float64(n), byName(res.Library, res.Window), res.rawPerSec(), res.rawShare())
	return res, e.dropTaskCollections(ctx, names)
}

func discoveryName(d mscheduler.Discovery) string {
	if d == mscheduler.DiscoveryChangeStream {
		return "change streams"
	}
	return "polling"
}

// startIdleConsumers starts a consumer on each named collection, all on
// client under one worker id, as a worker process serving them does. The
// first starts alone: with DiscoveryChangeStream it tells whether the
// server has change streams before n consumers try.
func startIdleConsumers(ctx context.Context, e *env, client *mongo.Client, names []string, discovery mscheduler.Discovery) ([]*consumer, error) {
	consumers := make([]*consumer, len(names))
	for i, name := range names {
		var err error
		consumers[i], err = mscheduler.NewConsumer(client.Database(database).Collection(name), noop, &mscheduler.ConsumerConfig{
			WorkerID: "idle", Capacity: idleCapacity, Discovery: discovery, Logger: e.logger,
		})
		if err != nil {
			return consumers, err
		}
	}
	if err := consumers[0].Start(ctx); err != nil {
		if discovery == mscheduler.DiscoveryChangeStream {
			return consumers, fmt.Errorf("%w: %v", errNoStreams, err)
		}
		return consumers, err
	}
	var g errgroup.Group
	for _, c := range consumers[1:] {
		g.Go(func() error { return c.Start(ctx) })
	}
	return consumers, g.Wait()
}

// rawIdlePoll is the raw limit of an idle collection: after offset, one
// find for the best due task per default PollInterval, on a ticker so that
// slow replies do not lower the rate. It returns nil once ctx ends.
func rawIdlePoll(ctx context.Context, stall time.Duration, coll *mongo.Collection, offset time.Duration) error {
	if sleepCtx(ctx, offset) != nil {
		return nil
	}
	ticker := time.NewTicker(mscheduler.PollIntervalDefault)
	defer ticker.Stop()
	for {
		if err := rawFindDue(ctx, stall, coll); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// rawFindDue looks for the task the raw claim would take, without
// claiming it: one find command.
func rawFindDue(ctx context.Context, stall time.Duration, coll *mongo.Collection) error {
	ctx, cancel := context.WithTimeout(ctx, stall)
	defer cancel()
	filter := bson.D{{Key: "status", Value: "pending"}, {Key: "run_at", Value: bson.D{{Key: "$lte", Value: time.Now()}}}}
	opts := options.FindOne().SetSort(bson.D{{Key: "priority", Value: -1}, {Key: "run_at", Value: 1}})
	err := coll.FindOne(ctx, filter, opts).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	return err
}

// sleepCtx waits for d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dropTaskCollections drops task collections with their metadata and run
// history: the idle phase makes many, and the next count of collections
// should start on a database no larger than the first.
func (e *env) dropTaskCollections(ctx context.Context, names []string) error {
	var errs []error
	for _, name := range names {
		for _, c := range []string{name, name + ".meta", name + ".runs"} {
			errs = append(errs, e.dropCollection(ctx, c))
		}
	}
	return errors.Join(errs...)
}

// byName is commands per second by name, most frequent first:
// "findAndModify 1.00, find 1.00, update 0.20".
func byName(counts map[string]int64, window time.Duration) string {
	names := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.2f", name, perSecondOf(counts[name], window))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
