package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// Schema versions. Version 1 was the first layout; version 2 added plans,
// execution timeouts, paused tasks and revoked runs, which a version-1
// worker would misread (it would run a planned task once and finish it).
const (
	// SchemaVersion is the version of the task document layout written by
	// this library.
	SchemaVersion = stored.SchemaVersion
	// SchemaVersionOldest is the oldest layout this library migrates.
	SchemaVersionOldest = stored.SchemaVersionOldest
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
func metaCollection(coll *mongo.Collection) *mongo.Collection { return upkeep.MetaCollection(coll) }

const schemaMetaID = stored.SchemaID

// ensureSchema brings coll to SchemaVersion: it refuses a newer collection,
// and one that is no task collection (see checkUnmarked), before writing
// anything, and migrates an older one. Every step is
// idempotent, so workers starting together, or one killed mid-way and
// started again, end in the same documents.
func ensureSchema(ctx context.Context, coll *mongo.Collection, log *slog.Logger) error {
	if reason := reservedReason(coll.Name()); reason != "" {
		return &NotTaskCollectionError{Collection: coll.Name(), Reason: reason}
	}
	meta := metaCollection(coll)
	raw, err := meta.FindOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}}).Raw()
	version := SchemaVersionOldest // no metadata: written by version 1, or empty
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		// No mark: a task collection of the first layout, a new one, or
		// someone else's (see checkUnmarked).
		if err := checkUnmarked(ctx, coll); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("mscheduler: read schema version of %s: %w", coll.Name(), err)
	default:
		v, prob := stored.SchemaVersionOf(raw)
		if prob != nil {
			// Edited by hand: every migration step is idempotent, so the
			// oldest version is safe to start from, and the document is
			// written again whole.
			log.Warn("the schema document of the collection's metadata cannot be read; migrating from the oldest version and writing it again",
				"collection", coll.Name(), "field", prob.Field, "reason", prob.Reason)
			return migrate(ctx, coll, meta, true, log)
		}
		version = v
	}
	if version > SchemaVersion {
		return &SchemaError{Collection: coll.Name(), Found: version, Supported: SchemaVersion}
	}
	if version == SchemaVersion {
		return nil
	}
	return migrate(ctx, coll, meta, false, log)
}

// migrate moves every document to SchemaVersion, then records the version.
// From 1 to 2 no field changes meaning, so the step only stamps the version;
// the metadata is written last, so a migration cut short is finished by the
// next run.
//
// A schema document that cannot be read (broken) is replaced whole,
// fenced on its version still not being a number.
func migrate(ctx context.Context, coll, meta *mongo.Collection, broken bool, log *slog.Logger) error {
	filter, update := taskstate.Migrate()
	if _, err := coll.UpdateMany(ctx, filter, update); err != nil {
		return fmt.Errorf("mscheduler: migrate %s to schema version %d: %w", coll.Name(), SchemaVersion, err)
	}
	now := time.Now().UTC()
	if broken {
		_, err := meta.ReplaceOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}, {Key: "version", Value: op("$not", op("$type", "number"))}},
			bson.D{{Key: "version", Value: SchemaVersion}, {Key: "updated_at", Value: now}})
		if err != nil {
			return fmt.Errorf("mscheduler: record schema version of %s: %w", coll.Name(), err)
		}
		return nil
	}
	_, err := meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "version", Value: SchemaVersion}}}, {Key: "$set", Value: bson.D{{Key: "updated_at", Value: now}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // another process created it meanwhile
		return ensureSchema(ctx, coll, log)
	}
	if err != nil {
		return fmt.Errorf("mscheduler: record schema version of %s: %w", coll.Name(), err)
	}
	return nil
}

// Adopt marks coll as a task collection, for a collection the library
// refuses with a *NotTaskCollectionError (its documents hold tasks, yet
// its metadata was lost): the next EnsureIndexes, consumer start or
// publish migrates its documents from the oldest layout, and from then on
// its consumers check every document, setting invalid, with the reason,
// those that are not tasks. A collection already marked is left as it
// is; a collection the library keeps for itself is refused.
func Adopt(ctx context.Context, coll *mongo.Collection) error {
	if reason := reservedReason(coll.Name()); reason != "" {
		return &NotTaskCollectionError{Collection: coll.Name(), Reason: reason}
	}
	_, err := metaCollection(coll).UpdateOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "version", Value: SchemaVersionOldest}}}}, options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) { // marked meanwhile, by another process
		return nil
	}
	if err != nil {
		return fmt.Errorf("mscheduler: adopt %s: %w", coll.Name(), err)
	}
	return nil
}
