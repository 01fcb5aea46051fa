// Package query holds the reads that mscheduler's machinery shares, shaped
// for both MongoDB and the development server.
package query

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// MaxStatements bounds the statements of one update command that the
// machinery sends (a batch of run ends with the history marks riding with
// it, removals of history marks): FerretDB keeps a pool connection per
// statement of an update until the command ends, and a command of more
// statements than its pool holds (100 on SQLite) waits forever, and with it
// every command behind it at the development server's front.
const MaxStatements = 64

// FindAll reads at most limit documents in one reply, with no getMore: a
// batch one larger than the limit (the development server leaves a cursor
// open after a reply that is exactly full). Each document is returned as
// stored, for the gate to read.
func FindAll(ctx context.Context, coll *mongo.Collection, filter, sort, proj bson.D, limit int) ([]bson.Raw, error) {
	opts := options.Find().SetProjection(proj).SetLimit(int64(limit)).SetBatchSize(int32(limit + 1))
	if sort != nil {
		opts.SetSort(sort)
	}
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, err
	}
	return raws, nil
}

// ByID reads the tasks of ids (their _id as read) with projection proj,
// returned by key; a document whose _id is not a string is left out.
func ByID(ctx context.Context, coll *mongo.Collection, ids bson.A, proj bson.D) (map[string]bson.Raw, error) {
	raws, err := FindAll(ctx, coll, bson.D{{Key: stored.FID, Value: bson.D{{Key: "$in", Value: ids}}}}, nil, proj, len(ids))
	if err != nil {
		return nil, fmt.Errorf("mscheduler: read tasks: %w", err)
	}
	out := make(map[string]bson.Raw, len(raws))
	for _, raw := range raws {
		if key, ok := raw.Lookup(stored.FID).StringValueOK(); ok {
			out[key] = raw
		}
	}
	return out, nil
}

// DuplicateIndexes returns the indexes of ops that failed on a duplicate key,
// and any other error.
func DuplicateIndexes(err error) (map[int]bool, error) {
	if err == nil {
		return nil, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, err
	}
	out := make(map[int]bool, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we.WriteError) {
			return nil, err
		}
		out[we.Index] = true
	}
	return out, nil
}

// CodeNotImplemented is the server error code for a feature it lacks.
const CodeNotImplemented = 238

// Caps remembers optional server features found missing, so that
// each is tried once and then done without.
type Caps struct {
	// noModifyProjection is set once the server refused a projection on
	// findAndModify (the development server does); from then on the whole
	// document comes back. Written and read by any goroutine.
	noModifyProjection atomic.Bool
}

// FindOneAndUpdate is coll.FindOneAndUpdate with projection applied where
// the server supports it.
func (c *Caps) FindOneAndUpdate(ctx context.Context, coll *mongo.Collection, filter, update any,
	opts *options.FindOneAndUpdateOptionsBuilder, projection bson.D,
) *mongo.SingleResult {
	if c.noModifyProjection.Load() {
		return coll.FindOneAndUpdate(ctx, filter, update, opts)
	}
	res := coll.FindOneAndUpdate(ctx, filter, update, opts.SetProjection(projection))
	var se mongo.ServerError
	if err := res.Err(); err != nil && errors.As(err, &se) && se.HasErrorCode(CodeNotImplemented) {
		c.noModifyProjection.Store(true)
		return coll.FindOneAndUpdate(ctx, filter, update, opts.SetProjection(nil))
	}
	return res
}

// Probe learns whether the server takes a projection on findAndModify,
// with a command that matches no document (a replacement of a random
// _id no document has: it writes nothing, spells no update, and names
// its _id as every single-document write does), so that the first ping
// of a run does not pay a refused command on its lease.
func (c *Caps) Probe(ctx context.Context, coll *mongo.Collection) error {
	nothing := bson.D{{Key: "_id", Value: "mscheduler-probe-" + uuid.NewString()}}
	opts := options.FindOneAndReplace().SetProjection(bson.D{{Key: "_id", Value: 1}})
	err := coll.FindOneAndReplace(ctx, nothing, bson.D{}, opts).Err()
	var se mongo.ServerError
	switch {
	case errors.As(err, &se) && se.HasErrorCode(CodeNotImplemented):
		c.noModifyProjection.Store(true)
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil
	}
	return err
}

// DeleteBatch bounds the documents one delete command removes.
const DeleteBatch = 500

// DeleteAll deletes what filter selects, a batch of DeleteBatch ids at a
// time, each delete fenced on the filter still holding, in at most batches
// commands (a negative number: until none is left). It returns how many it
// deleted.
func DeleteAll(ctx context.Context, coll *mongo.Collection, filter bson.D, batches int) (int64, error) {
	var total int64
	for i := 0; batches < 0 || i < batches; i++ {
		n, err := deleteOnce(ctx, coll, filter)
		total += n
		if err != nil || n < DeleteBatch {
			return total, err
		}
	}
	return total, nil
}

// deleteOnce deletes up to DeleteBatch documents that filter selects.
func deleteOnce(ctx context.Context, coll *mongo.Collection, filter bson.D) (int64, error) {
	cur, err := coll.Find(ctx, filter, options.Find().SetLimit(DeleteBatch).SetProjection(bson.D{{Key: stored.FID, Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	var ids []struct {
		ID bson.RawValue `bson:"_id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id.ID
	}
	res, err := coll.DeleteMany(ctx, append(bson.D{{Key: stored.FID, Value: bson.D{{Key: "$in", Value: in}}}}, filter...))
	if err != nil {
		return 0, fmt.Errorf("mscheduler: delete from %s: %w", coll.Name(), err)
	}
	return res.DeletedCount, nil
}
