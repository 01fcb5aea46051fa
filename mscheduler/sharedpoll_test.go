package mscheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestConsumersWithoutAStreamShareOnePoll: two polling consumers of two
// collections of one database, in one process, are polled by one
// aggregate per interval between them, and send no claim query of their
// own while idle (their own polls, a fallback, are an hour apart here);
// tasks published by another process, one due now and one due a moment
// later, are found by that poll and run.
func TestConsumersWithoutAStreamShareOnePoll(t *testing.T) {
	var mu sync.Mutex
	counts := map[string]int{}
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		kind := e.CommandName
		switch {
		case kind == "find" && e.Command.Lookup("filter", "free").Type != 0,
			kind == "findAndModify" && e.Command.Lookup("query", "free").Type != 0:
			kind = "claim query"
		case kind == "aggregate" && e.Command.Lookup("pipeline", "0", "$changeStream").Type != 0:
			kind = "change stream"
		}
		mu.Lock()
		counts[kind]++
		mu.Unlock()
	}}
	read := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range counts {
			out[k] = v
		}
		return out
	}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	first := mschedulertest.CollectionOf(t, client)
	second := first.Database().Collection(first.Name() + "_second")
	t.Cleanup(func() { _ = second.Drop(context.Background()) })
	ev := mschedulertest.NewEvents()
	var consumers []*mscheduler.Consumer[int, int]
	for _, coll := range []string{first.Name(), second.Name()} {
		cfg := fastConfig("w-"+coll, ev)
		cfg.Discovery = mscheduler.DiscoveryPoll
		cfg.PollInterval, cfg.ChangeStreamPollInterval = 100*time.Millisecond, time.Hour
		consumers = append(consumers, startConsumer(t, first.Database().Collection(coll), noop, cfg))
	}
	waitUntil(t, time.Minute, "the shared poll to serve both consumers", func() bool {
		return mscheduler.SharedPollServes(consumers[0]) && mscheduler.SharedPollServes(consumers[1])
	})

	// Idle: the shared poll goes on, the consumers send no claim query.
	// A poll of their own set before the shared poll served may come in
	// the first window, so a quiet window of five polls is looked for
	// among the first four; polling on their own, every 100 ms, they
	// would fill each.
	var before, after map[string]int
	for window := 0; ; window++ {
		before = read()
		waitUntil(t, time.Minute, "five shared polls", func() bool { return read()["aggregate"]-before["aggregate"] >= 5 })
		after = read()
		if after["claim query"] == before["claim query"] {
			break
		}
		if window == 3 {
			t.Fatalf("the idle consumers sent %d claim queries beside 5 shared polls, in each of 4 windows; want none", after["claim query"]-before["claim query"])
		}
	}
	if after["change stream"] != 0 {
		t.Errorf("%d change streams opened with Discovery poll", after["change stream"])
	}

	// Published by another process: no wake in this one.
	other := mschedulertest.NewClient(t)
	for i, coll := range []string{first.Name(), second.Name()} {
		p := newProducer[int](t, other.Database(first.Database().Name()).Collection(coll), nil)
		task := mscheduler.Task[int]{Key: "now"}
		if i == 1 {
			task = mscheduler.Task[int]{Key: "soon", RunAt: time.Now().Add(time.Second)}
		}
		if _, err := p.Publish(ctxT(t), task, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 2)
}
