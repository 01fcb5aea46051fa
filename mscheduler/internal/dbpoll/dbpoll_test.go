package dbpoll_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/dbpoll"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) } // with goleak

// sightings records what one probe was told.
type sightings struct {
	mu     sync.Mutex
	saw    []time.Time
	failed []error
	seen   chan struct{}
}

func (s *sightings) probe(coll *mongo.Collection, every time.Duration) *dbpoll.Probe {
	s.seen = make(chan struct{}, 64)
	return &dbpoll.Probe{Coll: coll,
		Eligible: func() bson.D { return bson.D{{Key: "status", Value: "pending"}} },
		Interval: func() time.Duration { return every },
		Saw: func(at time.Time) {
			s.mu.Lock()
			s.saw = append(s.saw, at)
			s.mu.Unlock()
			s.seen <- struct{}{}
		},
		Failed: func(err error) {
			s.mu.Lock()
			s.failed = append(s.failed, err)
			s.mu.Unlock()
		},
	}
}

func (s *sightings) last() (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.saw) == 0 {
		return time.Time{}, 0
	}
	return s.saw[len(s.saw)-1], len(s.saw)
}

// TestOneCommandPollsEveryCollectionOfADatabase: three consumers of three
// collections of one database are polled by one aggregate per interval;
// each is told the earliest run_at among its own eligible tasks (a run_at
// that is no date, or an array, is passed by), and only the consumers
// whose collection has one are told anything.
func TestOneCommandPollsEveryCollectionOfADatabase(t *testing.T) {
	var mu sync.Mutex
	aggregates, others := 0, 0
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch e.CommandName {
		case "aggregate":
			aggregates++
		case "find", "getMore", "count":
			others++
		}
	}}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(monitor))
	base := mschedulertest.CollectionOf(t, client)
	colls := []*mongo.Collection{base, base.Database().Collection(base.Name() + "_b"), base.Database().Collection(base.Name() + "_c")}
	t.Cleanup(func() {
		for _, c := range colls[1:] {
			_ = c.Drop(context.Background())
		}
	})
	ctx := t.Context()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	docs := map[int][]bson.D{
		1: {
			{{Key: "_id", Value: "late"}, {Key: "status", Value: "pending"}, {Key: "run_at", Value: t0.Add(time.Hour)}},
			{{Key: "_id", Value: "early"}, {Key: "status", Value: "pending"}, {Key: "run_at", Value: t0}},
			{{Key: "_id", Value: "done"}, {Key: "status", Value: "succeeded"}, {Key: "run_at", Value: t0.Add(-time.Hour)}},
			{{Key: "_id", Value: "by-hand"}, {Key: "status", Value: "pending"}, {Key: "run_at", Value: 7}},
			{{Key: "_id", Value: "by-hand-array"}, {Key: "status", Value: "pending"}, {Key: "run_at", Value: bson.A{0, t0.Add(-time.Hour)}}},
		},
		2: {{{Key: "_id", Value: "done"}, {Key: "status", Value: "succeeded"}, {Key: "run_at", Value: t0}}},
	}
	for i, ds := range docs {
		for _, d := range ds {
			if _, err := colls[i].InsertOne(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := make([]*sightings, len(colls))
	for i, c := range colls {
		seen[i] = &sightings{}
		p := seen[i].probe(c, 200*time.Millisecond)
		p.Open()
		defer p.Close()
	}
	select {
	case <-seen[1].seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer of the collection with a pending task was not told of it")
	}
	at, _ := seen[1].last()
	if !at.Equal(t0) {
		t.Errorf("told %v, want the earliest pending run_at %v", at, t0)
	}
	// Three polls more: the first consumer's and the third's collections
	// have nothing eligible, so they are never told anything.
	mu.Lock()
	start, startReads := aggregates, others
	mu.Unlock()
	for n := 0; n < 3; n++ {
		select {
		case <-seen[1].seen:
		case <-time.After(30 * time.Second):
			t.Fatal("the poll stopped")
		}
	}
	mu.Lock()
	polls, reads := aggregates-start, others-startReads
	mu.Unlock()
	if polls < 2 || polls > 4 {
		t.Errorf("%d aggregates for 3 polls of 3 collections, want one each", polls)
	}
	if reads != 0 {
		t.Errorf("%d finds, getMores or counts beside the polls, want none", reads)
	}
	for _, i := range []int{0, 2} {
		if _, n := seen[i].last(); n != 0 {
			t.Errorf("consumer %d was told of %d tasks in a collection with none eligible", i, n)
		}
	}
	for i, s := range seen {
		s.mu.Lock()
		if len(s.failed) > 0 {
			t.Errorf("consumer %d told of failures: %v", i, s.failed)
		}
		s.mu.Unlock()
	}
}

// TestPollServesAProbeFromItsFirstPollUntilItLeaves: a probe is Serving
// once a poll that includes it succeeded, and not after Close; the last
// probe of the database to leave stops its loop (goleak, in TestMain).
func TestPollServesAProbeFromItsFirstPollUntilItLeaves(t *testing.T) {
	coll := mschedulertest.Collection(t)
	var s sightings
	p := s.probe(coll, 100*time.Millisecond)
	if p.Serving() {
		t.Fatal("Serving before Open")
	}
	p.Open()
	deadline := time.Now().Add(30 * time.Second)
	for !p.Serving() {
		if time.Now().After(deadline) {
			t.Fatal("not Serving 30 s after Open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	p.Close() // idempotent
	if p.Serving() {
		t.Fatal("Serving after Close")
	}
}

// TestFailedPollTellsTheProbeOnce: a poll that fails (here, a filter the
// server refuses) tells the probe, which is no longer Serving; polls that
// go on failing do not tell it again.
func TestFailedPollTellsTheProbeOnce(t *testing.T) {
	coll := mschedulertest.Collection(t)
	// A collection with a document: a server may answer for one that does
	// not exist without reading the filter.
	if _, err := coll.InsertOne(t.Context(), bson.D{{Key: "status", Value: "pending"}}); err != nil {
		t.Fatal(err)
	}
	var s sightings
	p := s.probe(coll, 20*time.Millisecond)
	polls := make(chan struct{}, 64)
	p.Eligible = func() bson.D {
		select {
		case polls <- struct{}{}:
		default:
		}
		return bson.D{{Key: "status", Value: bson.D{{Key: "$type", Value: "no such type"}}}}
	}
	p.Open()
	defer p.Close()
	// The sixth poll begins after the fifth failed.
	for n := 0; n < 6; n++ {
		select {
		case <-polls:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d polls in 30 s", n)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) != 1 || p.Serving() {
		t.Fatalf("five failed polls told the probe %d times (want once), Serving %v", len(s.failed), p.Serving())
	}
}
