package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// indexModels are the indexes the library's queries need, each named for
// the query it serves.
func indexModels() []mongo.IndexModel {
	return []mongo.IndexModel{
		// The claim: status $in [pending, running], sorted by priority then run_at.
		{Keys: bson.D{{Key: fStatus, Value: 1}, {Key: fPriority, Value: -1}, {Key: fRunAt, Value: 1}}, Options: options.Index().SetName("claim")},
		// The next due task: status $in, run_at > now, sorted by run_at.
		{Keys: bson.D{{Key: fStatus, Value: 1}, {Key: fRunAt, Value: 1}}, Options: options.Index().SetName("due")},
		// The sweep: next_expiry < now.
		{Keys: bson.D{{Key: fNextExpiry, Value: 1}}, Options: options.Index().SetName("next_expiry")},
		// Filtering by tag.
		{Keys: bson.D{{Key: fTags, Value: 1}}, Options: options.Index().SetName("tags")},
		// The maintenance pass: tasks whose history records are not all written.
		{Keys: bson.D{{Key: fUnlogged, Value: 1}}, Options: options.Index().SetName("unlogged")},
	}
}

// retiredIndexes were created by earlier versions and serve no query now.
// key_unique kept keys unique, which the _id index does (a task's _id is
// its key); MongoDB refuses to shard a collection on a hashed _id beside
// it, since the shard key does not prefix it.
var retiredIndexes = []string{"key_unique"}

// dropRetiredIndexes drops the retired indexes among have.
func dropRetiredIndexes(ctx context.Context, coll *mongo.Collection, have []mongo.IndexSpecification) error {
	for _, spec := range have {
		if slices.Contains(retiredIndexes, spec.Name) {
			// Another process may have dropped it meanwhile.
			if err := coll.Indexes().DropOne(ctx, spec.Name); err != nil && !isIndexNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// indexesOf lists the indexes coll has: none for a collection not created
// yet.
func indexesOf(ctx context.Context, coll *mongo.Collection) ([]mongo.IndexSpecification, error) {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if isIndexNotFound(err) {
		return nil, nil
	}
	return specs, err
}

// hasIndex says have holds an index of m's name on m's keys. One of that
// name on other keys is not it: creating m then fails, and says so.
func hasIndex(have []mongo.IndexSpecification, m mongo.IndexModel) bool {
	if m.Options == nil {
		return false // no name to look for: created, as before
	}
	var opts options.IndexOptions
	for _, set := range m.Options.List() {
		_ = set(&opts)
	}
	keys, err := bson.Marshal(m.Keys)
	if err != nil || opts.Name == nil {
		return false
	}
	for _, spec := range have {
		if spec.Name == *opts.Name {
			return sameKeys(spec.KeysDocument, keys)
		}
	}
	return false
}

// sameKeys says two index key documents name the same fields in the same
// order and directions, whatever number type each server gives them in.
func sameKeys(a, b bson.Raw) bool {
	ea, errA := a.Elements()
	eb, errB := b.Elements()
	if errA != nil || errB != nil || len(ea) != len(eb) {
		return false
	}
	for i := range ea {
		x, okX := direction(ea[i].Value())
		y, okY := direction(eb[i].Value())
		if ea[i].Key() != eb[i].Key() || !okX || !okY || x != y {
			return false
		}
	}
	return true
}

func direction(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}

// isIndexNotFound reports a drop of an index (or collection) that is not
// there.
func isIndexNotFound(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(codeIndexNotFound) || se.HasErrorCode(codeNamespaceNotFound))
}

const (
	codeNamespaceNotFound = 26
	codeIndexNotFound     = 27
)

// expireIndex deletes finished tasks and run records at their expire_at,
// where the server has TTL indexes; without them it serves the maintenance
// pass that deletes them.
const expireIndex = upkeep.ExpireIndex

// ensureExpireIndex creates the expire_at index of coll as a TTL index, or
// as a plain one on a server without TTL indexes (the development server
// refuses the option). It reports whether the server deletes by itself.
func ensureExpireIndex(ctx context.Context, coll *mongo.Collection) (ttl bool, err error) {
	keys := bson.D{{Key: fExpireAt, Value: 1}}
	_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetName(expireIndex).SetExpireAfterSeconds(0)})
	if isNotImplemented(err) {
		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetName(expireIndex)})
		return false, err
	}
	return err == nil, err
}

// EnsureIndexes checks the collection's schema version, migrates a
// collection written by an older version, and creates every index the
// library's queries need. It is idempotent and safe to call from every
// process at start-up. A collection written by a newer version is refused
// with a *SchemaError, and nothing is written. It drops the indexes of
// earlier versions that no query uses any more (key_unique, which stood in
// the way of sharding the collection on a hashed _id).
//
// It lists each collection's indexes and creates only those missing, one
// per command (the development server fails a createIndexes that names
// several existing indexes): a worker's start on a collection set up
// before costs two listIndexes, not eleven commands, which counted on a
// slow server where workers restart.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection) error {
	if err := ensureSchema(ctx, coll, slog.Default()); err != nil {
		return err
	}
	runs := historyCollection(coll)
	for _, c := range []struct {
		coll   *mongo.Collection
		models []mongo.IndexModel
	}{{coll, indexModels()}, {runs, history.IndexModels()}} {
		have, err := indexesOf(ctx, c.coll)
		if err != nil {
			return fmt.Errorf("mscheduler: list indexes of %s: %w", c.coll.Name(), err)
		}
		if c.coll == coll {
			if err := dropRetiredIndexes(ctx, coll, have); err != nil {
				return fmt.Errorf("mscheduler: drop retired indexes of %s: %w", coll.Name(), err)
			}
		}
		for _, m := range c.models {
			if hasIndex(have, m) {
				continue
			}
			if _, err := c.coll.Indexes().CreateOne(ctx, m); err != nil {
				return fmt.Errorf("mscheduler: create indexes on %s: %w", c.coll.Name(), err)
			}
		}
		if slices.ContainsFunc(have, func(s mongo.IndexSpecification) bool { return s.Name == expireIndex }) {
			continue // TTL or not: which one the server took stays
		}
		if _, err := ensureExpireIndex(ctx, c.coll); err != nil {
			return fmt.Errorf("mscheduler: create indexes on %s: %w", c.coll.Name(), err)
		}
	}
	return nil
}
