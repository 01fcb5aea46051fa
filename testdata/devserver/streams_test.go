package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// event is a change event as the tests read it.
type event struct {
	ID            bson.Raw       `bson:"_id"`
	OperationType string         `bson:"operationType"`
	ClusterTime   bson.Timestamp `bson:"clusterTime"`
	WallTime      time.Time      `bson:"wallTime"`
	NS            struct {
		DB   string `bson:"db"`
		Coll string `bson:"coll"`
	} `bson:"ns"`
	DocumentKey       bson.M `bson:"documentKey"`
	FullDocument      bson.M `bson:"fullDocument"`
	BeforeChange      bson.M `bson:"fullDocumentBeforeChange"`
	UpdateDescription *struct {
		UpdatedFields bson.M   `bson:"updatedFields"`
		RemovedFields []string `bson:"removedFields"`
	} `bson:"updateDescription"`
}

// waitTime bounds how long a test waits for an event that must come; it only fails a broken test.
const waitTime = 30 * time.Second

func next(t *testing.T, cs *mongo.ChangeStream) event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()
	if !cs.Next(ctx) {
		t.Fatalf("no event: %v", cs.Err())
	}
	var e event
	if err := cs.Decode(&e); err != nil {
		t.Fatal(err)
	}
	if len(e.ID) == 0 || e.ClusterTime.IsZero() || e.WallTime.IsZero() {
		t.Fatalf("event %s lacks _id, clusterTime or wallTime", cs.Current)
	}
	return e
}

func watch(t *testing.T, w interface {
	Watch(context.Context, any, ...options.Lister[options.ChangeStreamOptions]) (*mongo.ChangeStream, error)
}, pipeline mongo.Pipeline, opts ...options.Lister[options.ChangeStreamOptions]) *mongo.ChangeStream {
	t.Helper()
	cs, err := w.Watch(t.Context(), pipeline, opts...)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close(context.Background()) })
	return cs
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func id(v any) bson.D { return bson.D{{Key: "_id", Value: v}} }

func set(kv ...any) bson.D {
	var d bson.D
	for i := 0; i < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return bson.D{{Key: "$set", Value: d}}
}

func TestStreamEventKinds(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{})

	must(coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "b", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 2}}}, {Key: "gone", Value: true}}))
	must(coll.UpdateOne(ctx, id(1), bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 2}, {Key: "b.x", Value: 5}}}, {Key: "$unset", Value: bson.D{{Key: "gone", Value: ""}}}}))
	must(coll.ReplaceOne(ctx, id(1), bson.D{{Key: "_id", Value: 1}, {Key: "c", Value: 3}}))
	must(coll.DeleteOne(ctx, id(1)))
	if err := coll.Drop(ctx); err != nil {
		t.Fatal(err)
	}

	ins := next(t, cs)
	if ins.OperationType != "insert" || ins.NS.DB != s.db.Name() || ins.NS.Coll != "c" || ins.DocumentKey["_id"] != int32(1) || ins.FullDocument["a"] != int32(1) {
		t.Fatalf("insert event: %+v", ins)
	}
	upd := next(t, cs)
	if upd.OperationType != "update" || upd.FullDocument != nil || upd.UpdateDescription == nil {
		t.Fatalf("update event: %+v", upd)
	}
	if got := upd.UpdateDescription.UpdatedFields; len(got) != 2 || got["a"] != int32(2) || got["b.x"] != int32(5) {
		t.Errorf("updatedFields = %v, want a: 2 and b.x: 5", got)
	}
	if got := upd.UpdateDescription.RemovedFields; !slices.Equal(got, []string{"gone"}) {
		t.Errorf("removedFields = %v, want [gone]", got)
	}
	rep := next(t, cs)
	if rep.OperationType != "replace" || rep.FullDocument["c"] != int32(3) || len(rep.FullDocument) != 2 {
		t.Fatalf("replace event: %+v", rep)
	}
	del := next(t, cs)
	if del.OperationType != "delete" || del.DocumentKey["_id"] != int32(1) || del.FullDocument != nil {
		t.Fatalf("delete event: %+v", del)
	}
	drop := next(t, cs)
	if drop.OperationType != "drop" || drop.NS.Coll != "c" || drop.DocumentKey != nil {
		t.Fatalf("drop event: %+v", drop)
	}
	inv := next(t, cs)
	if inv.OperationType != "invalidate" {
		t.Fatalf("after the drop: %+v, want an invalidate", inv)
	}
	events := []event{ins, upd, rep, del, drop}
	for i, e := range events[1:] {
		if !e.ClusterTime.After(events[i].ClusterTime) {
			t.Errorf("%s has clusterTime %v, not after the one before", e.OperationType, e.ClusterTime)
		}
	}
	if !inv.ClusterTime.Equal(drop.ClusterTime) {
		t.Errorf("the invalidate has clusterTime %v, the drop %v: want the drop's", inv.ClusterTime, drop.ClusterTime)
	}
	if cs.Next(ctx) || cs.Err() != nil || cs.ID() != 0 {
		t.Fatalf("after the invalidate: the stream goes on (err %v, cursor %d), want it closed", cs.Err(), cs.ID())
	}
}

// TestStreamFindAndModifyAndMany: findAndModify (update, upsert, remove), an update of many
// documents, an upsert through update, and updates that change nothing or match nothing (no
// event).
func TestStreamFindAndModifyAndMany(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	coll := s.db.Collection("c")
	must(coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "a"}, {Key: "p", Value: 2}}, bson.D{{Key: "_id", Value: 2}, {Key: "k", Value: "a"}, {Key: "p", Value: 1}}}))
	cs := watch(t, coll, mongo.Pipeline{})

	// The sort picks _id 2; the read before the write must pick the same one.
	if err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "k", Value: "a"}}, set("claimed", true), options.FindOneAndUpdate().SetSort(bson.D{{Key: "p", Value: 1}})).Err(); err != nil {
		t.Fatal(err)
	}
	must(coll.UpdateOne(ctx, id(1), set("k", "a")))                                                // changes nothing
	must(coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "b"}}, set("m", 9))) // matches nothing
	must(coll.UpdateMany(ctx, bson.D{{Key: "k", Value: "a"}}, set("m", 1)))
	must(coll.UpdateOne(ctx, id(3), set("k", "b"), options.UpdateOne().SetUpsert(true)))
	if err := coll.FindOneAndUpdate(ctx, id(4), set("k", "c"), options.FindOneAndUpdate().SetUpsert(true)).Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatal(err)
	}
	if err := coll.FindOneAndDelete(ctx, id(2)).Err(); err != nil {
		t.Fatal(err)
	}
	must(coll.DeleteMany(ctx, bson.D{}))

	want := []struct {
		op string
		id int32
	}{{"update", 2}, {"update", 1}, {"update", 2}, {"insert", 3}, {"insert", 4}, {"delete", 2}, {"delete", 1}, {"delete", 3}, {"delete", 4}}
	for i, w := range want {
		e := next(t, cs)
		if e.OperationType != w.op || e.DocumentKey["_id"] != w.id {
			t.Fatalf("event %d: %s of %v, want %s of %d", i, e.OperationType, e.DocumentKey["_id"], w.op, w.id)
		}
		if i == 0 && (len(e.UpdateDescription.UpdatedFields) != 1 || e.UpdateDescription.UpdatedFields["claimed"] != true) {
			t.Fatalf("findAndModify's update: %+v", e.UpdateDescription)
		}
	}
}

// libraryPipeline is the shape of mscheduler's own (mscheduler/internal/watch): new documents,
// a freed slot, a changed run_at.
func libraryPipeline() mongo.Pipeline {
	return mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$in", Value: bson.A{"insert", "replace"}}}}},
		bson.D{{Key: "updateDescription.updatedFields.free", Value: bson.D{{Key: "$gt", Value: 0}}}},
		bson.D{{Key: "updateDescription.updatedFields.run_at", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}}}}}
}

func TestStreamMatchFilters(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	coll := s.db.Collection("c")
	cs := watch(t, coll, libraryPipeline())

	must(coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "free", Value: 1}}))           // 1: insert
	must(coll.UpdateOne(ctx, id("k"), set("free", 0)))                                             // no: free 0
	must(coll.UpdateOne(ctx, id("k"), set("free", 2, "step", 2)))                                  // 2: free 2
	must(coll.UpdateOne(ctx, id("k"), set("other", 1)))                                            // no
	must(coll.UpdateOne(ctx, id("k"), set("run_at", time.Now(), "step", 3)))                       // 3: run_at
	must(coll.ReplaceOne(ctx, id("k"), bson.D{{Key: "_id", Value: "k"}, {Key: "step", Value: 4}})) // 4: replace
	must(coll.DeleteOne(ctx, id("k")))                                                             // no
	must(coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "last"}, {Key: "step", Value: 5}}))        // 5: insert

	for step, op := range []string{"insert", "update", "update", "replace", "insert"} {
		e := next(t, cs)
		if e.OperationType != op {
			t.Fatalf("event %d is %s (%+v), want %s", step+1, e.OperationType, e, op)
		}
		if step > 0 {
			got := e.FullDocument["step"]
			if e.UpdateDescription != nil {
				got = e.UpdateDescription.UpdatedFields["step"]
			}
			if got != int32(step+1) {
				t.Fatalf("event %d: step %v, want %d (%+v)", step+1, got, step+1, e)
			}
		}
	}
}

func TestStreamProject(t *testing.T) {
	s := startServer(t, testStreams())
	coll := s.db.Collection("c")
	cs := watch(t, s.db, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "ns.coll", Value: bson.D{{Key: "$regex", Value: `^c$`}}}}}},
		{{Key: "$project", Value: bson.D{{Key: "ns", Value: 1}}}},
	})
	must(s.db.Collection("other").InsertOne(t.Context(), bson.D{{Key: "x", Value: 1}}))
	must(coll.InsertOne(t.Context(), bson.D{{Key: "x", Value: 1}}))
	ctx, cancel := context.WithTimeout(t.Context(), waitTime)
	defer cancel()
	if !cs.Next(ctx) {
		t.Fatalf("no event: %v", cs.Err())
	}
	var m bson.M
	if err := cs.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if coll, _ := cs.Current.Lookup("ns", "coll").StringValueOK(); len(m) != 2 || m["_id"] == nil || coll != "c" {
		t.Fatalf("projected event = %v, want only _id and ns of c", m)
	}
}

func TestStreamRefusesWhatItDoesNotKnow(t *testing.T) {
	s := startServer(t, testStreams())
	coll := s.db.Collection("c")
	for _, c := range []struct {
		pipeline mongo.Pipeline
		name     string
	}{
		{mongo.Pipeline{{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}}}}}, "$group"},
		{mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "a", Value: bson.D{{Key: "$elemMatch", Value: bson.D{}}}}}}}}, "$elemMatch"},
		{mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "$expr", Value: bson.D{{Key: "$add", Value: bson.A{1, 2}}}}}}}}, "$add"},
		{mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "x", Value: "$y"}}}}}, "$project"},
	} {
		_, err := coll.Watch(t.Context(), c.pipeline)
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != codeNotImplemented || !strings.Contains(ce.Message, c.name) {
			t.Errorf("watch with %s: %v, want NotImplemented naming it", c.name, err)
		}
	}
}

func TestStreamResume(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{})
	must(coll.InsertOne(ctx, id(1)))
	if e := next(t, cs); e.DocumentKey["_id"] != int32(1) {
		t.Fatalf("first event: %+v", e)
	}
	token := cs.ResumeToken()
	_ = cs.Close(ctx)

	must(coll.InsertOne(ctx, id(2)))
	must(coll.InsertOne(ctx, id(3)))
	for _, opts := range []*options.ChangeStreamOptionsBuilder{options.ChangeStream().SetResumeAfter(token), options.ChangeStream().SetStartAfter(token)} {
		resumed := watch(t, coll, mongo.Pipeline{}, opts)
		for _, want := range []int32{2, 3} {
			if e := next(t, resumed); e.DocumentKey["_id"] != want {
				t.Fatalf("resumed: %+v, want the insert of %d", e, want)
			}
		}
	}
}

func isCode(err error, code int32) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && ce.Code == code
}

func TestStreamHistoryLost(t *testing.T) {
	cfg := testStreams()
	cfg.historySize = 3
	s := startServer(t, cfg)
	ctx := t.Context()
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{})
	must(coll.InsertOne(ctx, id(0)))
	next(t, cs)
	token := cs.ResumeToken()

	for i := 1; i <= 4; i++ {
		must(coll.InsertOne(ctx, id(i)))
	}
	// The open stream fell behind the history...
	if cs.Next(ctx) || !isCode(cs.Err(), codeChangeStreamHistLost) {
		t.Fatalf("a stream 4 changes behind a history of 3: %v, want ChangeStreamHistoryLost", cs.Err())
	}
	// ...and so did its token.
	if _, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token)); !isCode(err, codeChangeStreamHistLost) {
		t.Fatalf("resume from a token older than the history: %v, want ChangeStreamHistoryLost", err)
	}
	// A token still in the history resumes.
	cs = watch(t, coll, mongo.Pipeline{})
	must(coll.InsertOne(ctx, id(5)))
	next(t, cs)
	token = cs.ResumeToken()
	must(coll.InsertOne(ctx, id(6)))
	resumed := watch(t, coll, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token))
	if e := next(t, resumed); e.DocumentKey["_id"] != int32(6) {
		t.Fatalf("resumed: %+v", e)
	}
}

// TestStreamResumeAfterUnwatchedWrites: writes made while no stream covered the collection are
// not in the history, so a token from before them cannot resume.
func TestStreamResumeAfterUnwatchedWrites(t *testing.T) {
	cfg := testStreams()
	cfg.linger = 0
	s := startServer(t, cfg)
	ctx := t.Context()
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{})
	must(coll.InsertOne(ctx, id(1)))
	next(t, cs)
	token := cs.ResumeToken()
	_ = cs.Close(ctx)
	must(coll.InsertOne(ctx, id(2)))
	if _, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token)); !isCode(err, codeChangeStreamHistLost) {
		t.Fatalf("resume across unwatched writes: %v, want ChangeStreamHistoryLost", err)
	}
	// Nor once a new stream covers the collection again: the gap stays.
	watch(t, coll, mongo.Pipeline{})
	if _, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(token)); !isCode(err, codeChangeStreamHistLost) {
		t.Fatalf("resume across unwatched writes, with a stream open again: %v, want ChangeStreamHistoryLost", err)
	}
}

func TestStreamFullDocuments(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	coll := s.db.Collection("c")
	must(coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 1}}))
	cs := watch(t, coll, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup).SetFullDocumentBeforeChange(options.WhenAvailable))
	must(coll.UpdateOne(ctx, id(1), bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}))
	e := next(t, cs)
	if e.OperationType != "update" || e.FullDocument["n"] != int32(2) || e.BeforeChange["n"] != int32(1) {
		t.Fatalf("update with updateLookup and pre-images: %+v", e)
	}
}

func TestStreamGetMoreWaitsWithoutTheLock(t *testing.T) {
	s := startServer(t, testStreams())
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(waitTime-5*time.Second))
	got := make(chan bson.Raw, 1)
	readCtx, stopReading := context.WithTimeout(context.Background(), waitTime)
	go func() {
		defer close(got)
		if cs.Next(readCtx) {
			got <- cs.Current
		}
	}()
	t.Cleanup(func() { // before the stream closes
		stopReading()
		for range got {
		}
	})

	// Wait until the getMore waits for events, then write through another client: the write
	// goes through because the waiting getMore does not hold the front's lock.
	for deadline := time.Now().Add(waitTime); s.front.streams.waiting.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no getMore waits")
		}
	}
	// The lock is free while the getMore waits (other commands, the driver's heartbeats, take it
	// for a moment).
	for deadline := time.Now().Add(5 * time.Second); !s.front.exchangeMu.TryLock(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a getMore waits for events holding the front's lock")
		}
	}
	s.front.exchangeMu.Unlock()
	// The write's deadline comes well before the getMore's maxTimeMS.
	writer := s.connect(t).Database(s.db.Name()).Collection("c")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	must(writer.InsertOne(ctx, id("w")))
	if e := <-got; e == nil || e.Lookup("documentKey", "_id").StringValue() != "w" {
		t.Fatalf("the waiting getMore returned %v (%v)", e, cs.Err())
	}
}

func TestStreamGetMoreTimesOutEmpty(t *testing.T) {
	s := startServer(t, testStreams())
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(50*time.Millisecond))
	// The first TryNext takes the aggregate's (empty) first batch, the second sends a getMore.
	for range 2 {
		if cs.TryNext(t.Context()) {
			t.Fatalf("an event on an idle collection: %s", cs.Current)
		}
	}
	if cs.Err() != nil || cs.ID() == 0 || cs.ResumeToken() == nil {
		t.Fatalf("after an empty getMore: err %v, cursor %d, token %v; want the stream open with a token", cs.Err(), cs.ID(), cs.ResumeToken())
	}
	if s.front.streams.timeouts.Load() != 1 {
		t.Fatal("the getMore did not end by its maxTimeMS")
	}
}

func TestStreamDatabase(t *testing.T) {
	s := startServer(t, testStreams())
	ctx := t.Context()
	cs := watch(t, s.db, mongo.Pipeline{})
	must(s.db.Collection("a").InsertOne(ctx, id(1)))
	must(s.db.Collection("b").InsertOne(ctx, id(2)))
	if err := s.db.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 6 {
		e := next(t, cs)
		got = append(got, e.OperationType+" "+e.NS.Coll)
	}
	want := []string{"insert a", "insert b", "drop a", "drop b", "dropDatabase ", "invalidate "}
	if !slices.Equal(got, want) {
		t.Fatalf("database stream: %q, want %q", got, want)
	}
}

// TestStreamsCostNothingUnwatched: the front reads nothing of its own for writes that no stream
// covers: none before the first stream, none to another collection, none after the last closed.
func TestStreamsCostNothingUnwatched(t *testing.T) {
	cfg := testStreams()
	cfg.linger = 0
	s := startServer(t, cfg)
	ctx := t.Context()
	watched, other := s.db.Collection("watched"), s.db.Collection("other")
	writes := func(c *mongo.Collection) {
		must(c.InsertOne(ctx, bson.D{{Key: "k", Value: 1}}))
		must(c.UpdateMany(ctx, bson.D{}, set("k", 2)))
		_ = c.FindOneAndUpdate(ctx, bson.D{}, set("k", 3)).Err()
		must(c.DeleteMany(ctx, bson.D{}))
	}
	reads := func() int64 { return s.front.reader.sent.Load() }

	writes(watched)
	if n := reads(); n != 0 {
		t.Fatalf("%d reads of the front's own with no stream open", n)
	}
	cs := watch(t, watched, mongo.Pipeline{})
	writes(other)
	if n := reads(); n != 0 {
		t.Fatalf("%d reads for writes to a collection no stream watches", n)
	}
	writes(watched)
	if reads() == 0 {
		t.Fatal("no reads for writes to a watched collection: the test counts nothing")
	}
	_ = cs.Close(ctx)
	n := reads()
	writes(watched)
	if reads() != n {
		t.Fatalf("%d reads after the last stream closed", reads()-n)
	}
}

func TestStreamConcurrentWriters(t *testing.T) {
	s := startServer(t, testStreams())
	coll := s.db.Collection("c")
	cs := watch(t, coll, mongo.Pipeline{})
	const writers, docs = 6, 10

	done := make(chan error, writers)
	for w := range writers {
		c := s.connect(t).Database(s.db.Name()).Collection("c")
		go func() {
			for d := range docs {
				key := w*100 + d
				if _, err := c.InsertOne(t.Context(), bson.D{{Key: "_id", Value: key}, {Key: "n", Value: 0}}); err != nil {
					done <- err
					return
				}
				for range 2 {
					if _, err := c.UpdateOne(t.Context(), id(key), bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
		}()
	}

	seen := map[int32][]int32{} // per document: n after each event
	var last bson.Timestamp
	for range writers * docs * 3 {
		e := next(t, cs)
		if !e.ClusterTime.After(last) {
			t.Fatalf("clusterTime %v after %v", e.ClusterTime, last)
		}
		last = e.ClusterTime
		key := e.DocumentKey["_id"].(int32)
		n := int32(0)
		if e.UpdateDescription != nil {
			n = e.UpdateDescription.UpdatedFields["n"].(int32)
		}
		seen[key] = append(seen[key], n)
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != writers*docs {
		t.Fatalf("events for %d documents, want %d", len(seen), writers*docs)
	}
	for key, ns := range seen {
		if !slices.Equal(ns, []int32{0, 1, 2}) {
			t.Fatalf("document %d: n went %v, want 0, 1, 2", key, ns)
		}
	}
}

func TestNoChangeStreams(t *testing.T) {
	s := startServer(t, nil)
	if _, err := s.db.Collection("c").Watch(t.Context(), mongo.Pipeline{}); err == nil {
		t.Fatal("a change stream opened on a server without them")
	}
}
