package watch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/watch"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestConsumersOfADatabaseShareOneStream: the consumers of three task
// collections of one database, in one process, open one change stream
// between them; an event wakes only the consumers of its collection; the
// stream stays for those left when one leaves, and is closed by the last.
func TestConsumersOfADatabaseShareOneStream(t *testing.T) {
	var mu sync.Mutex
	commands := map[string]int{}
	var awaits []int64 // the getMores' maxTimeMS
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		commands[e.CommandName]++
		if e.CommandName == "getMore" {
			ms, _ := e.Command.Lookup("maxTimeMS").AsInt64OK()
			awaits = append(awaits, ms)
		}
	}}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return commands[name]
	}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	base := mschedulertest.CollectionOf(t, client)
	if !mschedulertest.HasChangeStreams(t.Context(), base) {
		t.Skip("this server has no change streams (a standalone MongoDB, or the development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set)")
	}
	colls := []*mongo.Collection{base, base.Database().Collection(base.Name() + "_b"), base.Database().Collection(base.Name() + "_c")}
	t.Cleanup(func() {
		for _, c := range colls[1:] {
			_ = c.Drop(context.Background())
		}
	})
	opened := count("aggregate") // HasChangeStreams opened one to see
	wakes := make([]chan struct{}, len(colls))
	streams := make([]*watch.Stream, len(colls))
	var errs atomic.Int32
	for i, c := range colls {
		wakes[i] = make(chan struct{}, 16)
		streams[i] = &watch.Stream{Coll: c,
			Wake:   func() { wakes[i] <- struct{}{} },
			Cancel: func(string) {},
			Error:  func(context.Context, error) { errs.Add(1) },
		}
		if err := streams[i].Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer streams[i].Close()
	}
	killed := count("killCursors")
	if n := count("aggregate") - opened; n != 1 {
		t.Fatalf("%d aggregate commands opened the streams of three consumers, want one", n)
	}
	for i, s := range streams {
		if !s.Delivering() {
			t.Fatalf("consumer %d: not delivering", i)
		}
	}

	// One insert into the second collection, then one into the first as a
	// mark: once the first is woken, the second was, and the third not.
	insert := func(c *mongo.Collection) {
		if _, err := c.InsertOne(t.Context(), bson.D{{Key: "status", Value: "pending"}}); err != nil {
			t.Fatal(err)
		}
	}
	insert(colls[1])
	insert(colls[0])
	woken(t, wakes[0], "the first collection's consumer")
	woken(t, wakes[1], "the second collection's consumer")
	if len(wakes[2]) != 0 {
		t.Fatal("the third collection's consumer was woken by the others' inserts")
	}

	// The first leaves; the others go on being served.
	streams[0].Close()
	insert(colls[2])
	woken(t, wakes[2], "the third collection's consumer, after the first left")
	if streams[0].Delivering() {
		t.Error("a consumer that left says it is delivering")
	}
	streams[1].Close()
	streams[2].Close()
	if n := count("killCursors") - killed; n != 1 {
		t.Errorf("%d killCursors after the last consumer left, want the one stream closed", n)
	}
	mu.Lock()
	for _, ms := range awaits {
		// A quiet process sends one getMore per await, not one a second.
		if ms != 5000 {
			t.Errorf("a getMore awaits %d ms, want 5000", ms)
		}
	}
	mu.Unlock()
	if n := errs.Load(); n != 0 {
		t.Errorf("%d stream errors", n)
	}
}

func woken(t *testing.T, ch chan struct{}, who string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s was not woken", who)
	}
}

// TestStreamReadsNoFurtherWhileItsConsumersAreFull: while its consumer has
// no free slot, the stream sends no getMore for the events coming (they
// wait on the server) for up to a second; once a slot is free the events
// come together, in one getMore or few.
func TestStreamReadsNoFurtherWhileItsConsumersAreFull(t *testing.T) {
	var getMores atomic.Int32
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "getMore" {
			getMores.Add(1)
		}
	}}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	coll := mschedulertest.CollectionOf(t, client)
	if !mschedulertest.HasChangeStreams(t.Context(), coll) {
		t.Skip("this server has no change streams (a standalone MongoDB, or the development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set)")
	}
	var idle atomic.Bool
	wakes := make(chan struct{}, 64)
	s := &watch.Stream{Coll: coll, Wake: func() { wakes <- struct{}{} }, Cancel: func(string) {},
		Error: func(context.Context, error) {}, Idle: idle.Load}
	if err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The first getMore may be on its way already: wait for it to be sent.
	<-time.After(200 * time.Millisecond)
	before := getMores.Load()
	other := client.Database(coll.Database().Name()).Collection(coll.Name()) // the same collection
	for i := range 5 {
		if _, err := other.InsertOne(t.Context(), bson.D{{Key: "n", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	<-time.After(500 * time.Millisecond)
	if n := getMores.Load() - before; n > 1 {
		t.Fatalf("%d getMores while the consumer was full, want at most the one waiting already", n)
	}
	idle.Store(true)
	for range 5 {
		woken(t, wakes, "the consumer, once a slot was free")
	}
}
