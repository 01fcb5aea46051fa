package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/paramcheck"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// A collection may carry a JSON Schema for the params of its tasks: every
// publish into it (Publish, PublishMany, and so the operator command and
// the dashboard's params edit) checks the params against it first, and a
// refusal names the field and writes nothing. The schema lives in the
// collection's metadata (<name>.meta, {_id: "params_schema", json}), so
// every producer of every service obeys the one stored there, and a
// person reads it with one query. A producer reads it again when it
// checks the collection's schema version (ProducerConfig.SchemaCheckInterval,
// a minute by default): a change reaches running producers within that.
//
// The schema sees params as relaxed extended JSON, the form mongosh prints:
// a date is {"$date": "..."}, an ObjectId {"$oid": "..."}. It must be
// self-contained: a $ref to another document is refused, not fetched.

// SetParamsSchema stores schema, a JSON Schema (draft 2020-12 unless its
// $schema says otherwise), as the params schema of coll; nil or empty
// removes it. A schema that does not compile, is over 64 KiB, or takes
// over a second to check a simple value is refused (field "schema") and
// nothing is written. Tasks already stored are not checked. A collection
// that is no task collection is refused (ErrNotTaskCollection), as by a
// publish.
func SetParamsSchema(ctx context.Context, coll *mongo.Collection, schema []byte) error {
	meta := metaCollection(coll)
	if len(schema) == 0 {
		if err := ensureSchema(ctx, coll, slog.Default()); err != nil {
			return err
		}
		_, err := meta.DeleteOne(ctx, bson.D{{Key: "_id", Value: stored.ParamsSchemaID}})
		return err
	}
	c, err := paramcheck.Compile(schema)
	if err == nil {
		err = c.Probe()
	}
	if err != nil {
		return invalid("schema", "%v", err)
	}
	if err := ensureSchema(ctx, coll, slog.Default()); err != nil {
		return err
	}
	_, err = meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: stored.ParamsSchemaID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "json", Value: string(schema)}}}, {Key: "$currentDate", Value: bson.D{{Key: "updated_at", Value: true}}}},
		options.UpdateOne().SetUpsert(true))
	return err
}

// ParamsSchema returns the params schema of coll as stored, or nil if it
// has none.
func ParamsSchema(ctx context.Context, coll *mongo.Collection) ([]byte, error) {
	raw, err := metaCollection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: stored.ParamsSchemaID}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	text, ok := raw.Lookup("json").StringValueOK()
	if !ok {
		return nil, paramsSchemaProblem(coll, "its field json is not a string")
	}
	return []byte(text), nil
}

// loadParamsChecker reads and compiles the params schema of coll: nil when
// it has none. A stored schema that cannot be used (edited by hand into
// something else) refuses publishes, saying where it is: checking params
// against nothing would let through what the schema was set to stop.
func loadParamsChecker(ctx context.Context, coll *mongo.Collection) (*paramcheck.Checker, error) {
	schema, err := ParamsSchema(ctx, coll)
	if err != nil || schema == nil {
		return nil, err
	}
	c, err := paramcheck.Compile(schema)
	if err != nil {
		return nil, paramsSchemaProblem(coll, err.Error())
	}
	return c, nil
}

func paramsSchemaProblem(coll *mongo.Collection, why string) error {
	return fmt.Errorf("mscheduler: the params schema of %s (in %s, _id %q) cannot be used: %s; fix it or remove it (SetParamsSchema with nil)",
		coll.Name(), metaCollection(coll).Name(), stored.ParamsSchemaID, why)
}

// checkParams refuses the first task whose params the collection's schema
// refuses and that this publish would store, naming it and the field.
// Params are stored for a new key, and for an existing one under
// UpdateParams or ResetFinished; a publish that only moves an existing
// task's run_at (MoveRunAt), or leaves it unchanged, does not write its
// params, so they are not held against it. Which keys exist is read only
// for the tasks refused, so a publish that passes costs nothing more.
func (p *Producer[P]) checkParams(ctx context.Context, docs []*taskDoc, opts *PublishOpts, prefixFormat string) error {
	c := p.params.Load()
	if c == nil {
		return nil
	}
	var refused []int
	var why []error
	for i, d := range docs {
		if err := c.Check(d.Params); err != nil {
			refused, why = append(refused, i), append(why, err)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	exists := map[string]bool{}
	if !opts.UpdateParams && !opts.ResetFinished {
		keys := make([]string, len(refused))
		for j, i := range refused {
			keys[j] = docs[i].Key
		}
		var err error
		if exists, err = existingKeys(ctx, p.coll, keys); err != nil {
			return err
		}
	}
	for j, i := range refused {
		if !exists[docs[i].Key] {
			return invalid(fieldName(prefixFormat, i, "Params"), "%v (the collection's params schema)", why[j])
		}
	}
	return nil
}

// existingKeys says which of keys are tasks of coll.
func existingKeys(ctx context.Context, coll *mongo.Collection, keys []string) (map[string]bool, error) {
	found, err := query.FindAll(ctx, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}}, nil, bson.D{{Key: "_id", Value: 1}}, len(keys))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(found))
	for _, raw := range found {
		if key, ok := raw.Lookup("_id").StringValueOK(); ok {
			out[key] = true
		}
	}
	return out, nil
}
