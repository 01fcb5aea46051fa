package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// checkBatch bounds the documents one check looks at.
const checkBatch = 20

// The claim query only matches well-formed documents, so a document that a
// person added or edited into a shape it cannot match (no status, an
// unknown one, a run_at that is not a date, a missing counter) would wait
// for ever, silently, while it looks pending. The check finds such
// documents and sets them invalid with the reason, so that the one query
// for invalid tasks shows them too.

// unclaimableFilter selects the documents that claim no run and are not
// finished for a reason the library knows (a pending task with no free
// slot and no run going never runs either). Each clause is served by an
// index the claims already need: the first by claim (status), the others
// by due (status, run_at).
func unclaimableFilter(now time.Time) bson.D {
	known := make(bson.A, len(knownStatuses))
	for i, s := range knownStatuses {
		known[i] = s
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fStatus, Value: op("$nin", known)}},
		bson.D{{Key: fStatus, Value: op("$in", claimableStatuses)}, {Key: fRunAt, Value: op("$not", op("$type", "date"))}},
		bson.D{{Key: fStatus, Value: op("$in", claimableStatuses)}, {Key: fRunAt, Value: op("$lte", now)}, {Key: "$or", Value: bson.A{
			op(fFree, op("$not", op("$type", "number"))),
			op(fConcurrency, op("$not", op("$type", "number"))),
			op(fRunning, op("$not", op("$type", "number"))),
		}}},
		bson.D{{Key: fStatus, Value: StatusPending}, {Key: fRunAt, Value: op("$lte", now)}, {Key: fRunning, Value: op("$lte", 0)}, {Key: fFree, Value: op("$lte", 0)}},
	}}}
}

// checkIfDue runs a check when its time has come, run by the claim loop
// of the maintenance lease holder alone: N workers cost the server one.
func (c *Consumer[P, R]) checkIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.checkAt) {
		return
	}
	st.checkAt = now.Add(jitter(c.cfg.CheckInterval))
	if !c.leader.Load() {
		return
	}
	if err := c.check(ctx, now); err != nil {
		c.loopError(ctx, err)
	}
}

// check sets the unclaimable documents it finds invalid, each fenced on
// still being unclaimable, so that a repair made meanwhile stands.
func (c *Consumer[P, R]) check(ctx context.Context, now time.Time) error {
	filter := unclaimableFilter(now)
	cur, err := c.coll.Find(ctx, filter, options.Find().SetLimit(checkBatch).SetProjection(bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}}))
	if err != nil {
		return fmt.Errorf("mscheduler: check for unclaimable tasks: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return fmt.Errorf("mscheduler: check for unclaimable tasks: %w", err)
	}
	for _, raw := range raws {
		id := raw.Lookup(fID)
		key, _ := id.StringValueOK()
		if key == "" {
			key = id.String()
		}
		prob := inspect(raw)
		if prob == nil { // not reached: every clause is a problem inspect names
			prob = &problem{field: "(document)", reason: "cannot be claimed as stored"}
		}
		q := &quarantine{key: key, filter: append(bson.D{{Key: fID, Value: id}}, filter...), raw: raw, prob: prob, found: foundByCheck}
		if _, err := c.quarantine(ctx, q); err != nil {
			c.loopError(ctx, err)
		}
	}
	return nil
}
