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

// TestConsumersOfAClientMeasureTheServerClockOnce: consumers started on
// one client with the default clocks measure the server's clock once
// between them (a hello), not once each: idle, 50 consumers sent a hello
// every 1.2 s for their clocks alone.
func TestConsumersOfAClientMeasureTheServerClockOnce(t *testing.T) {
	const consumers = 3
	var mu sync.Mutex
	hellos, seen := 0, map[string]bool{}
	passed := make(chan struct{}, 64)
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.CommandName == "hello" {
			hellos++
		}
		if coll, ok := e.Command.Lookup(e.CommandName).StringValueOK(); ok && e.CommandName != "hello" {
			seen[coll] = true
			select {
			case passed <- struct{}{}:
			default:
			}
		}
	}}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	var names []string
	for range consumers {
		coll := mschedulertest.Collection(t)
		names = append(names, coll.Name())
		cfg := &mscheduler.ConsumerConfig{WorkerID: "w", Logger: quietLog}
		startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
	}
	// Each consumer measures the clock before its first claim pass, whose
	// commands name its collection.
	deadline := time.After(waitTimeout)
	for {
		mu.Lock()
		all := true
		for _, n := range names {
			all = all && seen[n]
		}
		n := hellos
		mu.Unlock()
		if all {
			if n != 1 {
				t.Fatalf("%d consumers of one client sent %d hellos for their clocks, want 1", consumers, n)
			}
			return
		}
		select {
		case <-passed:
		case <-deadline:
			t.Fatal("not every consumer made a claim pass")
		}
	}
}
