package mscheduler

import (
	"context"
	"errors"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// codeNotImplemented is the server error code for a feature it lacks.
const codeNotImplemented = 238

// capabilities remembers optional server features found missing, so that
// each is tried once and then done without.
type capabilities struct {
	// noModifyProjection is set once the server refused a projection on
	// findAndModify (the development server does); from then on the whole
	// document comes back. Written and read by any goroutine.
	noModifyProjection atomic.Bool
}

// findOneAndUpdate is coll.FindOneAndUpdate with projection applied where
// the server supports it.
func (c *capabilities) findOneAndUpdate(ctx context.Context, coll *mongo.Collection, filter, update any,
	opts *options.FindOneAndUpdateOptionsBuilder, projection bson.D,
) *mongo.SingleResult {
	if c.noModifyProjection.Load() {
		return coll.FindOneAndUpdate(ctx, filter, update, opts)
	}
	res := coll.FindOneAndUpdate(ctx, filter, update, opts.SetProjection(projection))
	var se mongo.ServerError
	if err := res.Err(); err != nil && errors.As(err, &se) && se.HasErrorCode(codeNotImplemented) {
		c.noModifyProjection.Store(true)
		return coll.FindOneAndUpdate(ctx, filter, update, opts.SetProjection(nil))
	}
	return res
}
