package mscheduler

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// pageQuery is a find that reads one bounded page.
type pageQuery struct {
	filter, sort, projection bson.D
	limit                    int64
}

// findPage runs q as a find command, so that the deadline of ctx reaches
// the server as maxTimeMS: Collection.Find leaves it off, since its cursor
// may outlive the context, and a query the client gave up on would go on
// loading the server. A page is read whole at once, so the bound is right.
func findPage(ctx context.Context, coll *mongo.Collection, q pageQuery) (*mongo.Cursor, error) {
	cmd := bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: q.filter}}
	if len(q.sort) > 0 {
		cmd = append(cmd, bson.E{Key: "sort", Value: q.sort})
	}
	if len(q.projection) > 0 {
		cmd = append(cmd, bson.E{Key: "projection", Value: q.projection})
	}
	if q.limit > 0 {
		cmd = append(cmd, bson.E{Key: "limit", Value: q.limit}, bson.E{Key: "batchSize", Value: q.limit})
	}
	if deadline, ok := ctx.Deadline(); ok {
		cmd = append(cmd, bson.E{Key: "maxTimeMS", Value: max(1, time.Until(deadline).Milliseconds())})
	}
	return coll.Database().RunCommandCursor(ctx, cmd)
}
