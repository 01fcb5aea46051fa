package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// latencyResult holds publish-to-start latencies: from just before a task
// is published to its handler's start.
type latencyResult struct {
	Tasks   int
	Rate    float64
	Workers int

	Poll   []time.Duration // DiscoveryPoll, default PollInterval
	Stream []time.Duration // DiscoveryChangeStream; nil with StreamNA
	// StreamNA says why there is no change-stream figure.
	StreamNA string
	// Raw is the floor: an insert followed at once by a claim, timed from
	// before the insert to the claim's reply.
	Raw []time.Duration
}

// errNoStreams says that a consumer requiring change streams did not start.
var errNoStreams = errors.New("no change streams")

func latencyPhase(ctx context.Context, e *env) (latencyResult, error) {
	res := latencyResult{Tasks: e.cfg.Latency, Rate: e.cfg.Rate, Workers: e.cfg.LatencyWorkers}
	var err error
	if res.Raw, err = rawLatency(ctx, e); err != nil {
		return res, fmt.Errorf("raw: %w", err)
	}
	e.say("latency: raw insert then claim, p50 %s", fmtDuration(percentile(res.Raw, 50)))
	if res.Poll, err = libraryLatency(ctx, e, mscheduler.DiscoveryPoll); err != nil {
		return res, fmt.Errorf("polling: %w", err)
	}
	e.say("latency: polling consumers, p50 %s", fmtDuration(percentile(res.Poll, 50)))
	res.Stream, err = libraryLatency(ctx, e, mscheduler.DiscoveryChangeStream)
	switch {
	case errors.Is(err, errNoStreams):
		res.StreamNA = "n/a (no change streams)"
		e.say("latency: change streams: %v", err)
	case err != nil:
		return res, fmt.Errorf("change streams: %w", err)
	default:
		e.say("latency: change-stream consumers, p50 %s", fmtDuration(percentile(res.Stream, 50)))
	}
	return res, nil
}

// latencies collects durations from concurrent handlers.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

func (l *latencies) list() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.all...)
}

// libraryLatency starts idle consumers with the given discovery, publishes
// one task at a time at cfg.Rate, and returns how long after its publish
// each task's handler started. With DiscoveryChangeStream on a server
// without change streams it returns errNoStreams.
func libraryLatency(ctx context.Context, e *env, discovery mscheduler.Discovery) ([]time.Duration, error) {
	name := "latency_" + string(discovery)
	if err := e.freshCollection(ctx, name); err != nil {
		return nil, err
	}
	n := e.cfg.LatencyWorkers
	clients, err := e.clients(ctx, n+1, newCommands()) // the last one publishes
	if err != nil {
		return nil, err
	}
	defer disconnect(clients...)
	producer, err := mscheduler.NewProducer[params](clients[n].Database(database).Collection(name), nil)
	if err != nil {
		return nil, err
	}
	// A first publish measures the producer's server clock, which would
	// otherwise delay the first task; it is due in an hour.
	if err := publishOneByOne(ctx, producer, e.cfg.Latency, 1, time.Now().Add(time.Hour)); err != nil {
		return nil, err
	}

	var lat latencies
	started := newTally(e.cfg.Latency)
	handler := func(_ context.Context, t *mscheduler.Task[params]) (struct{}, error) {
		lat.add(time.Since(time.Unix(0, t.Params.PublishedNS)))
		started.add()
		return struct{}{}, nil
	}
	consumers := make([]*consumer, n)
	defer stopConsumers(consumers)
	for i := range n {
		consumers[i], err = mscheduler.NewConsumer(clients[i].Database(database).Collection(name), handler, &mscheduler.ConsumerConfig{
			WorkerID: fmt.Sprintf("latency-%d", i), Capacity: e.cfg.Capacity, Discovery: discovery, Logger: e.logger,
		})
		if err != nil {
			return nil, err
		}
		if err := consumers[i].Start(ctx); err != nil {
			if discovery == mscheduler.DiscoveryChangeStream {
				return nil, fmt.Errorf("%w: %v", errNoStreams, err)
			}
			return nil, err
		}
	}
	// Let the consumers finish their first pass and wait.
	time.Sleep(time.Second)

	if err := publishAtRate(ctx, e.cfg.Rate, e.cfg.Latency, func(i int) error {
		return publishOneByOne(ctx, producer, i, 1, time.Time{})
	}); err != nil {
		return nil, err
	}
	if err := started.wait(ctx, e.cfg.Stall); err != nil {
		return nil, err
	}
	if err := stopConsumers(consumers); err != nil {
		return nil, err
	}
	return lat.list(), e.dropCollection(ctx, name)
}

// rawLatency times, at cfg.Rate, an insert followed at once by a claim of
// the task: the shortest publish-to-start any worker on this server gets.
func rawLatency(ctx context.Context, e *env) ([]time.Duration, error) {
	const name = "latency_raw"
	if err := e.freshCollection(ctx, name); err != nil {
		return nil, err
	}
	clients, err := e.clients(ctx, 1, newCommands())
	if err != nil {
		return nil, err
	}
	defer disconnect(clients...)
	coll := rawCollection(clients[0], name)
	var out []time.Duration
	err = publishAtRate(ctx, e.cfg.Rate, e.cfg.Latency, func(i int) error {
		start := time.Now()
		if err := rawInsertOne(ctx, e, coll, i, 1, time.Time{}); err != nil {
			return err
		}
		id, runID, claimed, err := rawClaim(ctx, e.cfg.Stall, coll, "raw-latency")
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		out = append(out, time.Since(start))
		ok, err := rawComplete(ctx, e.cfg.Stall, coll, "raw-latency", id, runID, claimed)
		if err == nil && !ok {
			err = errors.New("matched nothing")
		}
		if err != nil {
			return fmt.Errorf("complete %v: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, e.dropCollection(ctx, name)
}

// publishAtRate calls publish(i) for i in 0..n-1, one every 1/rate seconds.
func publishAtRate(ctx context.Context, rate float64, n int, publish func(i int) error) error {
	ticker := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer ticker.Stop()
	for i := range n {
		if err := publish(i); err != nil {
			return err
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
