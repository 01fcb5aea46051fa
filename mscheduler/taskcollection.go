package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// A task collection is marked by its schema document ({_id: "schema"} in
// <name>.meta), which the library writes before a collection's first task.
// The library writes into no other collection of the user's: a consumer,
// publish or action on a collection that is not empty and has no mark is
// refused before anything is written, for a consumer would otherwise set
// every document of someone's collection invalid, and an action would
// write a status into it. Collections of the first layout, which had no
// metadata, are told by their documents (see looksLikeTasks) and marked as
// they are migrated.

// ErrNotTaskCollection is matched by a *NotTaskCollectionError.
var ErrNotTaskCollection = errors.New("mscheduler: not a task collection")

// NotTaskCollectionError refuses a collection that is not a task
// collection: one the library keeps for itself (the worker registry, a
// task collection's metadata or history), or one that holds documents
// but no mark of a task collection. Nothing was written to it.
type NotTaskCollectionError struct {
	Collection string
	Reason     string
	// Adoptable says Adopt may mark the collection: it is not one the
	// library keeps for itself.
	Adoptable bool
}

func (e *NotTaskCollectionError) Error() string {
	msg := fmt.Sprintf("mscheduler: collection %s is not a task collection (%s); nothing was written to it", e.Collection, e.Reason)
	if e.Adoptable {
		msg += fmt.Sprintf(". If it does hold mscheduler tasks, adopt it: `mscheduler -c %s migrate --adopt`, or mscheduler.Adopt", e.Collection)
	}
	return msg
}

func (e *NotTaskCollectionError) Is(target error) bool { return target == ErrNotTaskCollection }

// reservedReason says why a collection name can never be a task
// collection's, or "".
func reservedReason(name string) string {
	switch {
	case name == WorkersCollection:
		return "it is the worker registry"
	case strings.HasPrefix(name, "system."):
		return "it is a system collection of the server"
	case strings.HasSuffix(name, ".meta"):
		return "it holds a task collection's metadata"
	case strings.HasSuffix(name, ".runs"):
		return "it holds a task collection's run history"
	}
	return ""
}

// CheckTaskCollectionName refuses, by its name alone, a collection that
// can never be a task collection: one the library keeps for itself, a
// system collection, or a name the server takes for no collection.
func CheckTaskCollectionName(name string) error {
	switch {
	case name == "":
		return errors.New("mscheduler: a collection name must not be empty")
	case strings.ContainsAny(name, "$\x00"):
		return fmt.Errorf("mscheduler: collection name %q must not contain $ or NUL", name)
	}
	if reason := reservedReason(name); reason != "" {
		return &NotTaskCollectionError{Collection: name, Reason: reason}
	}
	return nil
}

// CheckTaskCollection says, writing nothing, whether coll is a task
// collection or may become one (it is empty, or does not exist yet): nil,
// or a *NotTaskCollectionError, the refusal a publish or a consumer's
// start would meet. A front end serving collections by name checks with it
// before it reads one for a client.
func CheckTaskCollection(ctx context.Context, coll *mongo.Collection) error {
	if reason := reservedReason(coll.Name()); reason != "" {
		return &NotTaskCollectionError{Collection: coll.Name(), Reason: reason}
	}
	err := metaCollection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: schemaMetaID}}).Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return checkUnmarked(ctx, coll)
	default:
		return fmt.Errorf("mscheduler: read schema version of %s: %w", coll.Name(), err)
	}
}

// unmarkedSample is how many documents of an unmarked collection are read
// to tell a collection of the first layout from someone else's.
const unmarkedSample = 16

// checkUnmarked decides whether a collection without the mark may become
// a task collection: it must be empty (or not exist yet), or hold only
// documents of an older task layout. It writes nothing.
func checkUnmarked(ctx context.Context, coll *mongo.Collection) error {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetLimit(unmarkedSample).
		SetProjection(bson.D{{Key: stored.FSchema, Value: 1}, {Key: stored.FStatus, Value: 1}}))
	if err != nil {
		return fmt.Errorf("mscheduler: read %s: %w", coll.Name(), err)
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("mscheduler: read %s: %w", coll.Name(), err)
	}
	for _, d := range docs {
		if reason := notTaskReason(d); reason != "" {
			return &NotTaskCollectionError{Collection: coll.Name(), Adoptable: true,
				Reason: fmt.Sprintf("%s has no schema document, and its document %s %s", metaCollection(coll).Name(), stored.IDString(d.Lookup("_id")), reason)}
		}
	}
	return nil
}

// notTaskReason says why a document of an unmarked collection is no task
// of an older layout, or "": a task of every layout carries its layout's
// number in schema, and its status.
func notTaskReason(d bson.Raw) string {
	v, ok := d.Lookup(stored.FSchema).AsInt64OK()
	switch {
	case !ok:
		return "has no schema version (a whole number in schema)"
	case v < SchemaVersionOldest || v > SchemaVersion:
		return fmt.Sprintf("has schema %d, no layout this library knows", v)
	}
	if _, ok := d.Lookup(stored.FStatus).StringValueOK(); !ok {
		return "has no status (a string)"
	}
	return ""
}
