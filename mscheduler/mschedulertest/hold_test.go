package mschedulertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// holdSetup starts a HoldProxy before the test server and a client
// through it; the test's collection is reached both through the proxy and
// directly.
func holdSetup(t *testing.T, split bool) (p *mschedulertest.HoldProxy, held, direct *mongo.Collection) {
	t.Helper()
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the proxy stands in front of a single-host server", len(hosts))
	}
	p, err := mschedulertest.StartHoldProxy(hosts[0], mschedulertest.HoldOptions{Split: split})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	direct = mschedulertest.Collection(t)
	return p, client.Database(mschedulertest.Database).Collection(direct.Name()), direct
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func countOf(t *testing.T, coll *mongo.Collection, filter bson.D) int64 {
	t.Helper()
	n, err := coll.CountDocuments(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHoldBeforeSend: a held insert has not reached the server while a
// write of another client does; released, it lands.
func TestHoldBeforeSend(t *testing.T) {
	p, held, direct := holdSetup(t, false)
	ctx := waitCtx(t)
	h := p.Hold(mschedulertest.BeforeSend, mschedulertest.OnCollection(direct.Name(), "insert"))
	done := make(chan error, 1)
	go func() {
		_, err := held.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}})
		done <- err
	}()
	cmd, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Name != "insert" || cmd.Collection != direct.Name() || cmd.Seq == 0 {
		t.Fatalf("held %+v", cmd)
	}
	if _, err := direct.InsertOne(ctx, bson.D{{Key: "_id", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, direct, bson.D{{Key: "_id", Value: "a"}}); n != 0 {
		t.Fatal("the held insert reached the server")
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, direct, bson.D{}); n != 2 {
		t.Fatalf("%d documents, want 2", n)
	}
}

// TestHoldBeforeReply: the server applied a held command, whose client
// has not learnt of it yet.
func TestHoldBeforeReply(t *testing.T) {
	p, held, direct := holdSetup(t, false)
	ctx := waitCtx(t)
	h := p.Hold(mschedulertest.BeforeReply, mschedulertest.OnCollection(direct.Name(), "insert"))
	done := make(chan error, 1)
	go func() {
		_, err := held.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}})
		done <- err
	}()
	if _, err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countOf(t, direct, bson.D{{Key: "_id", Value: "a"}}); n != 1 {
		t.Fatal("the insert held before its reply is not applied")
	}
	select {
	case err := <-done:
		t.Fatalf("the client learnt of the held insert: %v", err)
	default:
	}
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHoldBetweenStatements: a split bulk update is held after its first
// statement; a write of another client lands between its statements and
// makes the second miss; the client's answer counts what each statement
// did, an upsert at its own index.
func TestHoldBetweenStatements(t *testing.T) {
	p, held, direct := holdSetup(t, true)
	ctx := waitCtx(t)
	if _, err := direct.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}, {Key: "s", Value: 0}}, bson.D{{Key: "_id", Value: "b"}, {Key: "s", Value: 0}}}); err != nil {
		t.Fatal(err)
	}
	second := func(c mschedulertest.Command) bool {
		return c.Collection == direct.Name() && c.Name == "update" && c.Statement == 1
	}
	h := p.Hold(mschedulertest.BeforeSend, second)
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "a"}, {Key: "s", Value: 0}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: 1}}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "b"}, {Key: "s", Value: 0}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: 1}}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "c"}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: 1}}}}).SetUpsert(true),
	}
	type answer struct {
		res *mongo.BulkWriteResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := held.BulkWrite(ctx, models)
		done <- answer{res, err}
	}()
	cmd, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Statements != 3 {
		t.Fatalf("held statement %d of %d, want of 3", cmd.Statement, cmd.Statements)
	}
	if n := countOf(t, direct, bson.D{{Key: "s", Value: 1}}); n != 1 {
		t.Fatalf("%d documents updated before the second statement, want 1", n)
	}
	if _, err := direct.UpdateOne(ctx, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: 2}}}}); err != nil {
		t.Fatal(err)
	}
	h.Release()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.res.MatchedCount != 1 || a.res.ModifiedCount != 1 || a.res.UpsertedCount != 1 || a.res.UpsertedIDs[2] != "c" {
		t.Fatalf("result %+v, want 1 matched, 1 modified, c upserted at index 2", a.res)
	}
}

// TestSplitOrderedStopsAtFirstError: a split ordered update stops at its
// first refused statement and reports it at its index.
func TestSplitOrderedStopsAtFirstError(t *testing.T) {
	_, held, direct := holdSetup(t, true)
	ctx := waitCtx(t)
	if _, err := direct.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}, bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: "text"}}, bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "a"}}).SetUpdate(inc),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "b"}}).SetUpdate(inc), // $inc of a string: refused
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "c"}}).SetUpdate(inc),
	}
	_, err := held.BulkWrite(ctx, models)
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != 1 {
		t.Fatalf("ordered update of a, b, c with b refused: %v, want one write error at index 1", err)
	}
	if n := countOf(t, direct, bson.D{{Key: "n", Value: 2}}); n != 1 {
		t.Fatalf("%d documents updated, want a only", n)
	}
}

// TestReleasedHoldTakesNothing: a hold released before any command
// reached it stops no command.
func TestReleasedHoldTakesNothing(t *testing.T) {
	p, held, direct := holdSetup(t, false)
	ctx := waitCtx(t)
	h := p.Hold(mschedulertest.BeforeSend, mschedulertest.OnCollection(direct.Name(), "insert"))
	h.Release()
	if _, err := held.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Reached():
		t.Fatal("a released hold took a command")
	default:
	}
}
