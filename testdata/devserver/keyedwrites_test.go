package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// keyedColl returns a collection of the test's server holding tasks a (running), b (running)
// and c (pending).
func keyedColl(t *testing.T, s *testServer) *mongo.Collection {
	t.Helper()
	coll := s.db.Collection("tasks")
	docs := []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "status", Value: "running"}, {Key: "run", Value: bson.D{{Key: "id", Value: "r1"}}}, {Key: "n", Value: 0}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "status", Value: "running"}, {Key: "run", Value: bson.D{{Key: "id", Value: "r2"}}}, {Key: "n", Value: 0}},
		bson.D{{Key: "_id", Value: "c"}, {Key: "status", Value: "pending"}, {Key: "n", Value: 0}},
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return coll
}

func nOf(t *testing.T, coll *mongo.Collection, id string) int32 {
	t.Helper()
	var d struct{ N int32 }
	if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.N
}

func inc() bson.D { return bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}} }

func fenced(id, status string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "status", Value: status}}
}

func TestKeyedWritesChangeWhatTheFilterMatches(t *testing.T) {
	s := startServer(t, testStreams())
	coll := keyedColl(t, s)
	ctx := context.Background()
	checks := s.front.reader.sent.Load()

	res, err := coll.UpdateOne(ctx, fenced("a", "running"), inc())
	if err != nil || res.MatchedCount != 1 || res.ModifiedCount != 1 {
		t.Fatalf("a fenced update that holds: %+v, %v", res, err)
	}
	if res, err = coll.UpdateOne(ctx, fenced("c", "running"), inc()); err != nil || res.MatchedCount != 0 {
		t.Fatalf("a fenced update that fails: %+v, %v", res, err)
	}
	if s.front.reader.sent.Load() == checks {
		t.Error("no statement was checked by key")
	}

	// Several statements, one of which fails its fence: FerretDB answers for the whole.
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(fenced("a", "running")).SetUpdate(inc()),
		mongo.NewUpdateOneModel().SetFilter(fenced("b", "running")).SetUpdate(inc()),
	}
	bw, err := coll.BulkWrite(ctx, models)
	if err != nil || bw.MatchedCount != 2 || bw.ModifiedCount != 2 {
		t.Fatalf("two fenced updates that hold: %+v, %v", bw, err)
	}
	models = append(models, mongo.NewUpdateOneModel().SetFilter(fenced("c", "running")).SetUpdate(inc()))
	if bw, err = coll.BulkWrite(ctx, models); err != nil || bw.MatchedCount != 2 {
		t.Fatalf("three fenced updates, one failing: %+v, %v", bw, err)
	}

	// A later statement on the same document is judged after the earlier one.
	models = []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(fenced("a", "running")).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "done"}}}}),
		mongo.NewUpdateOneModel().SetFilter(fenced("a", "done")).SetUpdate(inc()),
	}
	if bw, err = coll.BulkWrite(ctx, models); err != nil || bw.MatchedCount != 2 {
		t.Fatalf("two statements on one document: %+v, %v", bw, err)
	}
	if got := nOf(t, coll, "a"); got != 4 {
		t.Errorf("a.n = %d, want 4", got)
	}
	if got := nOf(t, coll, "c"); got != 0 {
		t.Errorf("c.n = %d: a failed fence changed it", got)
	}

	// A statement that may change any document, then one fenced on what it changes: the fenced
	// one is judged after it (sent as sent), as FerretDB would.
	var reply struct{ N, NModified int32 }
	err = s.db.RunCommand(ctx, bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{
		bson.D{{Key: "q", Value: bson.D{{Key: "status", Value: "pending"}}}, {Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "running"}}}}}, {Key: "multi", Value: true}},
		bson.D{{Key: "q", Value: fenced("c", "running")}, {Key: "u", Value: inc()}},
	}}}).Decode(&reply)
	if err != nil || reply.N != 2 || nOf(t, coll, "c") != 1 {
		t.Fatalf("a multi update, then a fence on what it changed: %+v, %v, c.n %d; want 2 matched, c.n 1", reply, err, nOf(t, coll, "c"))
	}

	// An ObjectId _id is looked up by key too.
	oid := bson.NewObjectID()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "status", Value: "running"}, {Key: "n", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	before := s.front.reader.sent.Load()
	if res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "status", Value: "running"}}, inc()); err != nil || res.ModifiedCount != 1 {
		t.Fatalf("a fenced update of an ObjectId _id: %+v, %v", res, err)
	}
	if s.front.reader.sent.Load() == before {
		t.Error("the fenced update of an ObjectId _id was not checked by key")
	}

	// An upsert is forwarded as sent and inserts.
	if res, err = coll.UpdateOne(ctx, fenced("d", "pending"), inc(), options.UpdateOne().SetUpsert(true)); err != nil || res.UpsertedCount != 1 {
		t.Fatalf("an upsert: %+v, %v", res, err)
	}

	// findAndModify: the document before, or none.
	var prior struct{ N int32 }
	if err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "run.id", Value: "r2"}}, inc()).Decode(&prior); err != nil || prior.N != 2 {
		t.Fatalf("findAndModify fenced on a dotted field: n %d, %v", prior.N, err)
	}
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "run.id", Value: "r9"}}, inc()).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("findAndModify whose fence fails: %v, want no document", err)
	}
	if got := nOf(t, coll, "b"); got != 3 {
		t.Errorf("b.n = %d, want 3", got)
	}
}

func TestKeyWritesNarrowsOnlyWhatMatches(t *testing.T) {
	s := startServer(t, nil)
	coll := keyedColl(t, s)
	db := s.db.Name()
	request := func(body bson.D) []byte {
		doc, err := bson.Marshal(append(body, bson.E{Key: "$db", Value: db}))
		if err != nil {
			t.Fatal(err)
		}
		return opMsgBytes(0, doc)
	}
	stmt := func(q bson.D, extra ...bson.E) bson.D {
		return append(bson.D{{Key: "q", Value: q}, {Key: "u", Value: inc()}}, extra...)
	}
	filters := func(req []byte) []bson.Raw {
		cmd, ok := parseCommand(req)
		if !ok {
			t.Fatal("not a command")
		}
		var qs []bson.Raw
		for _, st := range cmd.documents("updates") {
			qs = append(qs, st.Lookup("q").Document())
		}
		if q, ok := cmd.body.Lookup("query").DocumentOK(); ok {
			qs = append(qs, q)
		}
		return qs
	}
	// keyedTo is the _id a filter was narrowed to, or "" if it was not.
	keyedTo := func(q bson.Raw) string {
		elems, _ := q.Elements()
		if len(elems) != 1 || elems[0].Key() != "_id" {
			return ""
		}
		return elems[0].Value().StringValue()
	}
	for _, c := range []struct {
		name  string
		body  bson.D
		keyed []string // the _id each filter is narrowed to ("": none); nil: the request is sent as it is
	}{
		{"one that matches", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "running"))}}}, []string{"a"}},
		{"one that does not", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "pending"))}}}, []string{noMatchID}},
		{"one that does, two that do not", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "pending")), stmt(fenced("b", "running")), stmt(fenced("c", "running"))}}}, []string{noMatchID, "b", noMatchID}},
		{"an _id alone, and one that matches", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(bson.D{{Key: "_id", Value: "c"}}), stmt(fenced("b", "running"))}}}, []string{"c", "b"}},
		{"no _id", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(bson.D{{Key: "status", Value: "running"}})}}}, nil},
		{"an _id by operator", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a"}}}}, {Key: "status", Value: "running"}})}}}, nil},
		{"an upsert", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "running"), bson.E{Key: "upsert", Value: true})}}}, nil},
		{"one _id twice", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "running")), stmt(fenced("a", "running"))}}}, nil},
		{"an _id alone, then the same _id fenced", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(bson.D{{Key: "_id", Value: "a"}}), stmt(fenced("a", "running"))}}}, nil},
		{"one of no _id, then one fenced", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(bson.D{{Key: "status", Value: "pending"}}, bson.E{Key: "multi", Value: true}), stmt(fenced("c", "running"))}}}, nil},
		{"one fenced, then one of no _id", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("c", "running")), stmt(bson.D{{Key: "status", Value: "pending"}})}}}, []string{noMatchID, ""}},
		{"a fence on an _id no document has", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("zzz", "running"))}}}, nil},
		{"a statement that is not a document", bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "running")), 5}}}, nil},
		{"findAndModify of a query that is not a document", bson.D{{Key: "findAndModify", Value: "tasks"}, {Key: "query", Value: "a"}, {Key: "update", Value: inc()}}, nil},
		{"findAndModify that matches", bson.D{{Key: "findAndModify", Value: "tasks"}, {Key: "query", Value: fenced("b", "running")}, {Key: "update", Value: inc()}}, []string{"b"}},
		{"findAndModify that does not", bson.D{{Key: "findAndModify", Value: "tasks"}, {Key: "query", Value: fenced("b", "done")}, {Key: "update", Value: inc()}}, []string{noMatchID}},
	} {
		req := request(c.body)
		got, byKey := keyWritesLocked(s.front, req)
		if byKey != (c.keyed != nil) {
			t.Errorf("%s: sent by key %v", c.name, byKey)
		}
		if c.keyed == nil {
			if string(got) != string(req) {
				t.Errorf("%s: the request was changed", c.name)
			}
			continue
		}
		qs := filters(got)
		if len(qs) != len(c.keyed) {
			t.Fatalf("%s: %d filters, want %d", c.name, len(qs), len(c.keyed))
		}
		for i, q := range qs {
			if keyedTo(q) != c.keyed[i] {
				t.Errorf("%s: filter %d is %s", c.name, i, q)
			}
		}
		if cmd, _ := parseCommand(got); cmd.requestID != mustCommand(t, req).requestID {
			t.Errorf("%s: the request id changed", c.name)
		}
	}

	// Should a document have the _id that matches nothing, a failed fence is sent as it is.
	if _, err := coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: noMatchID}, {Key: "status", Value: "running"}}); err != nil {
		t.Fatal(err)
	}
	req := request(bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{stmt(fenced("a", "pending"))}}})
	if got, byKey := keyWritesLocked(s.front, req); byKey || string(got) != string(req) {
		t.Error("a failed fence was narrowed to an _id that a document has")
	}
}

// keyWritesLocked is keyWrites as the front calls it, under its lock (its reads share the
// front's own backend connection).
func keyWritesLocked(f *front, req []byte) ([]byte, bool) {
	f.exchangeMu.Lock()
	defer f.exchangeMu.Unlock()
	got, how, _ := f.keyWrites(req)
	return got, how != notKeyed
}

// TestAKeyedWriteIsNotReadAgainForItsStreams: the document a keyed write's check read whole is
// the before-image its change streams take: a fenced update that holds costs the check and the
// read after it, one whose fence fails the check and two lookups (the document exists, noMatchID
// does not), and the stream sees the first one's change, as it would have, and nothing of the
// second.
func TestAKeyedWriteIsNotReadAgainForItsStreams(t *testing.T) {
	s := startServer(t, testStreams())
	coll := keyedColl(t, s)
	ctx := context.Background()
	stream, err := coll.Watch(ctx, bson.A{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close(ctx)
	for _, c := range []struct {
		name    string
		filter  bson.D
		matched int64
		reads   int64
	}{
		{"a fence that holds", fenced("a", "running"), 1, 2},
		{"a fence that fails", fenced("a", "pending"), 0, 3},
	} {
		before := s.front.reader.sent.Load()
		res, err := coll.UpdateOne(ctx, c.filter, inc())
		if err != nil || res.MatchedCount != c.matched {
			t.Fatalf("%s: %+v, %v; want %d matched", c.name, res, err, c.matched)
		}
		if reads := s.front.reader.sent.Load() - before; reads != c.reads {
			t.Errorf("%s: the front read %d times, want %d", c.name, reads, c.reads)
		}
	}
	ev, err := nextUpdate(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if ev.OperationType != "update" || ev.DocumentKey.ID != "a" || len(ev.Update.UpdatedFields) != 1 || ev.Update.UpdatedFields["n"] != int32(1) {
		t.Errorf("event %+v, want a's update of n to 1", ev)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "z"}}); err != nil {
		t.Fatal(err)
	}
	if !stream.Next(ctx) || stream.Current.Lookup("documentKey", "_id").StringValue() != "z" {
		t.Errorf("the event after a's is %s, want z's insert: the failed fence made an event", stream.Current)
	}
}

// updateEvent is what the keyed writes' tests read of a change event.
type updateEvent struct {
	OperationType string `bson:"operationType"`
	DocumentKey   struct {
		ID string `bson:"_id"`
	} `bson:"documentKey"`
	Update struct {
		UpdatedFields bson.M `bson:"updatedFields"`
	} `bson:"updateDescription"`
}

// nextUpdate waits for the stream's next event and decodes it.
func nextUpdate(ctx context.Context, stream *mongo.ChangeStream) (updateEvent, error) {
	var ev updateEvent
	if !stream.Next(ctx) {
		return ev, fmt.Errorf("no event: %v", stream.Err())
	}
	return ev, stream.Decode(&ev)
}

func mustCommand(t *testing.T, req []byte) *command {
	cmd, ok := parseCommand(req)
	if !ok {
		t.Fatal("not a command")
	}
	return cmd
}

func TestAFindAndModifyOfNoIDIsKeyedWhereAStreamReadsItAnyway(t *testing.T) {
	s := startServer(t, testStreams())
	coll := keyedColl(t, s)
	ctx := context.Background()
	claim := func() bson.D {
		return bson.D{{Key: "findAndModify", Value: "tasks"}, {Key: "query", Value: bson.D{{Key: "status", Value: "running"}}},
			{Key: "sort", Value: bson.D{{Key: "_id", Value: -1}}}, {Key: "update", Value: inc()}, {Key: "$db", Value: s.db.Name()}}
	}
	request := func(body bson.D) []byte {
		doc, err := bson.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		return opMsgBytes(0, doc)
	}
	if _, byKey := keyWritesLocked(s.front, request(claim())); byKey {
		t.Error("a findAndModify of no _id was keyed while no stream covers the collection")
	}

	stream, err := coll.Watch(ctx, bson.A{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close(ctx)
	s.front.exchangeMu.Lock()
	got, how, _ := s.front.keyWrites(request(claim()))
	s.front.exchangeMu.Unlock()
	if q := mustCommand(t, got).body.Lookup("query").Document(); how != keyedFirst || q.String() != `{"_id": "b"}` {
		t.Errorf("keyed %q to %s, want %q to the first running task by the sort, b", how, q, keyedFirst)
	}

	// Through the driver: the claim takes b, then a, then nothing, and the stream sees each.
	for _, want := range []string{"b", "a"} {
		var doc struct {
			ID string `bson:"_id"`
		}
		err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "status", Value: "running"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "taken"}}}},
			options.FindOneAndUpdate().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&doc)
		if err != nil || doc.ID != want {
			t.Fatalf("claimed %q, %v; want %s", doc.ID, err, want)
		}
		ev, err := nextUpdate(ctx, stream)
		if err != nil || ev.OperationType != "update" || ev.DocumentKey.ID != want || ev.Update.UpdatedFields["status"] != "taken" {
			t.Errorf("event %+v, %v; want %s's status taken", ev, err, want)
		}
	}
	if err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "status", Value: "running"}}, inc()).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
		t.Errorf("a claim with nothing left: %v", err)
	}
}
