package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/sync/errgroup"
)

// connectionsInUse is how many commands a consumer may have in flight at
// once in its ordinary course: a claim, an upkeep step, the change
// stream's wait, a batch of pings and the read after it, two batches of
// run ends, and a history write.
const connectionsInUse = 8

// warmPool has Start's other commands joined by pings, as many as make
// connectionsInUse at once, before the first claim: on a slow server a new
// connection costs a handshake of a round trip or more (the driver opens
// two at a time), and a freshly started worker whose first runs' pings,
// run ends and history writes all wanted one at once lost leases waiting.
// On a fast server the commands end before more connections are needed,
// and few are opened. Start's own commands are the others (prepare).
func (c *Engine) warmPool(ctx context.Context, g *errgroup.Group, others int) {
	db := c.coll.Database()
	for range connectionsInUse - others {
		g.Go(func() error {
			_ = db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err() // a failure is for the real commands to report
			return nil
		})
	}
}
