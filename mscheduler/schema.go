package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Schema versions. Version 1 was the first layout; version 2 added plans,
// execution timeouts, paused tasks and revoked runs, which a version-1
// worker would misread (it would run a planned task once and finish it).
const (
	// SchemaVersion is the version of the task document layout written by
	// this library.
	SchemaVersion = 2
	// SchemaVersionOldest is the oldest layout this library migrates.
	SchemaVersionOldest = 1
)

// ErrSchema is matched by a *SchemaError.
var ErrSchema = errors.New("mscheduler: schema version")

// SchemaError reports a collection written by a newer version of the
// library than this one: it is refused, and nothing is written to it.
type SchemaError struct {
	Collection string
	Found      int // the collection's version
	Supported  int // SchemaVersion
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("mscheduler: collection %s is at schema version %d, written by a newer mscheduler; this one reads up to version %d: upgrade it",
		e.Collection, e.Found, e.Supported)
}

func (e *SchemaError) Is(target error) bool { return target == ErrSchema }

// metaCollection holds a task collection's own metadata, beside it.
func metaCollection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".meta")
}

// schemaMeta is the metadata document {_id: "schema"}.
type schemaMeta struct {
	Version   int       `bson:"version"`
	UpdatedAt time.Time `bson:"updated_at"`
}

const schemaMetaID = "schema"

// ensureSchema brings coll to SchemaVersion: it refuses a newer collection
// before writing anything, and migrates an older one. Every step is
// idempotent, so workers starting together, or one killed mid-way and
// started again, end in the same documents.
func ensureSchema(ctx context.Context, coll *mongo.Collection) error {
	meta := metaCollection(coll)
	var m schemaMeta
	err := meta.FindOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}}).Decode(&m)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		m.Version = SchemaVersionOldest // no metadata: written by version 1, or empty
	case err != nil:
		return fmt.Errorf("mscheduler: read schema version of %s: %w", coll.Name(), err)
	}
	if m.Version > SchemaVersion {
		return &SchemaError{Collection: coll.Name(), Found: m.Version, Supported: SchemaVersion}
	}
	if m.Version == SchemaVersion {
		return nil
	}
	return migrate(ctx, coll, meta)
}

// migrate moves every document to SchemaVersion, then records the version.
// From 1 to 2 no field changes meaning, so the step only stamps the version;
// the metadata is written last, so a migration cut short is finished by the
// next run.
func migrate(ctx context.Context, coll, meta *mongo.Collection) error {
	_, err := coll.UpdateMany(ctx, bson.D{{Key: fSchema, Value: op("$lt", SchemaVersion)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fSchema, Value: SchemaVersion}}}})
	if err != nil {
		return fmt.Errorf("mscheduler: migrate %s to schema version %d: %w", coll.Name(), SchemaVersion, err)
	}
	_, err = meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "version", Value: SchemaVersion}}}, {Key: "$set", Value: bson.D{{Key: "updated_at", Value: time.Now().UTC()}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // another process created it meanwhile
		return ensureSchema(ctx, coll)
	}
	if err != nil {
		return fmt.Errorf("mscheduler: record schema version of %s: %w", coll.Name(), err)
	}
	return nil
}
