package mscheduler

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// indexModels are the indexes the library's queries need, each named for
// the query it serves.
func indexModels() []mongo.IndexModel {
	return []mongo.IndexModel{
		// Publishing is idempotent by key; every fenced write selects by key.
		{Keys: bson.D{{Key: fKey, Value: 1}}, Options: options.Index().SetName("key_unique").SetUnique(true)},
		// The claim: status $in [pending, running], sorted by priority then run_at.
		{Keys: bson.D{{Key: fStatus, Value: 1}, {Key: fPriority, Value: -1}, {Key: fRunAt, Value: 1}}, Options: options.Index().SetName("claim")},
		// The next due task: status $in, run_at > now, sorted by run_at.
		{Keys: bson.D{{Key: fStatus, Value: 1}, {Key: fRunAt, Value: 1}}, Options: options.Index().SetName("due")},
		// The sweep: next_expiry < now.
		{Keys: bson.D{{Key: fNextExpiry, Value: 1}}, Options: options.Index().SetName("next_expiry")},
		// Filtering by tag.
		{Keys: bson.D{{Key: fTags, Value: 1}}, Options: options.Index().SetName("tags")},
	}
}

// EnsureIndexes checks the collection's schema version, migrates a
// collection written by an older version, and creates every index the
// library's queries need. It is idempotent and safe to call from every
// process at start-up. A collection written by a newer version is refused
// with a *SchemaError, and nothing is written.
//
// Indexes are created one per command: the development server fails a
// createIndexes that names several existing indexes.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection) error {
	if err := ensureSchema(ctx, coll); err != nil {
		return err
	}
	for _, m := range indexModels() {
		if _, err := coll.Indexes().CreateOne(ctx, m); err != nil {
			return fmt.Errorf("mscheduler: create indexes on %s: %w", coll.Name(), err)
		}
	}
	return nil
}
