package mscheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestSweepExpiresTogether: a worker holding eight runs goes silent (every
// command it sends fails from then on). Another worker's sweep records the
// eight runs expired in one or two commands, not one each: on a slow
// server, a command per lapsed run made a sweep outlast the leases it was
// there to keep short.
func TestSweepExpiresTogether(t *testing.T) {
	const n = 8
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], n)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("k%d", i), WorkerIDs: []string{"ghost", "sweeper"},
			PingInterval: 300 * time.Millisecond, WorkerTimeout: time.Second, MaxFailedRuns: 3}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	var silent atomic.Bool
	proxy, ghostClient := newCmdProxy(t, nil)
	proxy.failIf = func(string, bson.Raw) bool { return silent.Load() }
	ghostEvents := mschedulertest.NewEvents()
	ghost := fastConfig("ghost", ghostEvents)
	ghost.Capacity = n
	release := make(chan struct{})
	defer close(release)
	startConsumer(t, dbCollection(ghostClient, coll), func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-release
		return 0, nil
	}, ghost)
	ghostEvents.WaitCount(t, mscheduler.EventClaimed, n)
	silent.Store(true)

	expiries := &updateStatements{match: func(st bson.Raw) bool { return bytes.Contains(st, []byte("worker stopped pinging")) }}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: expiries.started}))
	ev := mschedulertest.NewEvents()
	sweeper := fastConfig("sweeper", ev)
	sweeper.Capacity, sweeper.SweepInterval = 1, 200*time.Millisecond // it claims little: the sweep is under test
	startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, sweeper)

	ev.WaitCount(t, mscheduler.EventExpired, n)
	commands := expiries.snapshot()
	total := 0
	for _, s := range commands {
		total += s
	}
	if total != n || len(commands) > 2 {
		t.Errorf("expiry commands of %v statements; want the %d expiries in one or two commands", commands, n)
	}
	for i := range n {
		st := readTask(t, coll, fmt.Sprintf("k%d", i))
		if len(st.Runs) == 0 || st.Runs[0].Outcome != "expired" || st.Runs[0].WorkerID != "ghost" {
			t.Errorf("k%d: first run %+v, want the ghost's, expired", i, st.Runs)
		}
	}
}

// TestSweepsGoOnWhileMaintenanceWaits: a worker's maintenance turn waits
// on the server (its command to take the maintenance lease is held for
// the whole test). Meanwhile the runs of a worker gone silent are expired
// by that worker's sweeps: on a slow server a maintenance pass of several
// commands took 25 s, and sweeps that waited behind it left lapsed leases
// held that long.
func TestSweepsGoOnWhileMaintenanceWaits(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	task := mscheduler.Task[int]{Key: "k", WorkerIDs: []string{"ghost", "sweeper"},
		PingInterval: 300 * time.Millisecond, WorkerTimeout: time.Second, MaxFailedRuns: 3}
	if _, err := p.Publish(ctxT(t), task, nil); err != nil {
		t.Fatal(err)
	}
	var silent atomic.Bool
	proxy, ghostClient := newCmdProxy(t, nil)
	proxy.failIf = func(string, bson.Raw) bool { return silent.Load() }
	ghostEvents := mschedulertest.NewEvents()
	release := make(chan struct{})
	defer close(release)
	startConsumer(t, dbCollection(ghostClient, coll), func(ctx context.Context, _ *mscheduler.Task[int]) (int, error) {
		<-release
		return 0, nil
	}, fastConfig("ghost", ghostEvents))
	ghostEvents.WaitCount(t, mscheduler.EventClaimed, 1)

	hp, client := heldClient(t, singleHost(t), false)
	hold := hp.Hold(mschedulertest.BeforeSend, mschedulertest.Updating(coll.Name()+".meta", "lease_until"))
	defer hold.Release()
	ev := mschedulertest.NewEvents()
	sweeper := fastConfig("sweeper", ev)
	sweeper.Capacity, sweeper.SweepInterval = 1, 200*time.Millisecond
	sweeper.MaintenanceInterval = 200 * time.Millisecond
	startConsumer(t, dbCollection(client, coll), func(context.Context, *mscheduler.Task[int]) (int, error) { return 1, nil }, sweeper)
	waitHeld(t, hold, "the sweeper's take of the maintenance lease")

	silent.Store(true)
	ev.WaitCount(t, mscheduler.EventExpired, 1)
	select {
	case <-hold.Reached():
	default:
		t.Fatal("the hold was not reached")
	}
	if st := readTask(t, coll, "k"); len(st.Runs) == 0 || st.Runs[0].Outcome != "expired" || st.Runs[0].WorkerID != "ghost" {
		t.Errorf("first run %+v, want the ghost's, expired", st.Runs)
	}
}
