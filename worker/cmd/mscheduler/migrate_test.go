package main

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestMigrate: a collection of the first layout (no metadata, documents
// stamped schema 1) is migrated and says so; run again, it is left
// as it is; a newer collection is refused with both versions named.
func TestMigrate(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "old"}, {Key: "key", Value: "old"}, {Key: "status", Value: "pending"}, {Key: "schema", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		return runCommand(t, serverEnv(), append([]string{"--db", mschedulertest.Database, "-c", coll.Name()}, args...)...)
	}
	if r := run("migrate").wantOK(t); r.stdout != coll.Name()+": migrated from schema version 1 to 2; indexes ensured\n" {
		t.Errorf("first migrate printed %q", r.stdout)
	}
	var doc struct {
		Schema int `bson:"schema"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "old"}}).Decode(&doc); err != nil || doc.Schema != mscheduler.SchemaVersion {
		t.Fatalf("document after migrate: schema %d (%v), want %d", doc.Schema, err, mscheduler.SchemaVersion)
	}
	if r := run("migrate").wantOK(t); r.stdout != coll.Name()+": at schema version 2; indexes ensured\n" {
		t.Errorf("second migrate printed %q", r.stdout)
	}
	meta := coll.Database().Collection(coll.Name() + ".meta")
	if _, err := meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: "schema"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: 3}}}}); err != nil {
		t.Fatal(err)
	}
	run("migrate").wantError(t, exitError, "schema version 3", "reads up to version 2")
}

// TestMigrateNewCollection: with --create, a new collection is stamped and indexed.
func TestMigrateNewCollection(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	r := runCommand(t, serverEnv(), "--db", mschedulertest.Database, "-c", coll.Name(), "migrate", "--create").wantOK(t)
	if r.stdout != coll.Name()+": new collection, stamped schema version 2; indexes created\n" {
		t.Errorf("migrate printed %q", r.stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil || len(specs) < 2 {
		t.Fatalf("indexes after migrate: %d (%v), want the library's", len(specs), err)
	}
}

// TestMigrateAdopt: a collection of documents that are no tasks, and no
// mark of a task collection, is refused by migrate with the way to adopt
// it, and left as it was; migrate --adopt marks it, at this version.
func TestMigrateAdopt(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	ctx, cancel := context.WithTimeout(context.Background(), mschedulertest.WaitTimeout)
	defer cancel()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "lost"}, {Key: "key", Value: "lost"}, {Key: "status", Value: "pending"}}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		return runCommand(t, serverEnv(), append([]string{"--db", mschedulertest.Database, "-c", coll.Name()}, args...)...)
	}
	run("migrate").wantError(t, exitError, "is not a task collection", "no schema version", "migrate --adopt")
	if n, err := coll.Database().Collection(coll.Name()+".meta").CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
		t.Fatalf("metadata documents after a refused migrate: %d (%v), want none", n, err)
	}
	if r := run("migrate", "--adopt").wantOK(t); r.stdout != coll.Name()+": adopted as a task collection; migrated from schema version 1 to 2; indexes ensured\n" {
		t.Errorf("migrate --adopt printed %q", r.stdout)
	}
	var mark struct {
		Version int `bson:"version"`
	}
	if err := coll.Database().Collection(coll.Name()+".meta").FindOne(ctx, bson.D{{Key: "_id", Value: "schema"}}).Decode(&mark); err != nil || mark.Version != mscheduler.SchemaVersion {
		t.Fatalf("schema document after migrate --adopt: version %d (%v), want %d", mark.Version, err, mscheduler.SchemaVersion)
	}
}
