package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// checkBatch bounds the documents one check looks at; a full batch that
// changed something is followed by another at once.
const checkBatch = 100

// The claim query only matches well-formed documents, so a document that a
// person added or edited into a shape it cannot match would wait for ever,
// silently, while it looks pending (see taskstate.Audit). The check finds
// such documents, repairs the fields bound to their status that are the
// library's to repair, and sets the others invalid with the reason, so
// that the one query for invalid tasks shows them too.

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
	again, err := c.check(ctx, now)
	if err != nil {
		c.loopError(ctx, err)
	}
	if again {
		st.checkAt = now // the rest at the next pass of the loop
		c.wake()
	}
}

// check repairs or sets invalid the documents of one batch the audit
// finds, each fenced on still being as read and still found, so that a
// repair made meanwhile stands. It says whether another batch may wait.
func (c *Consumer[P, R]) check(ctx context.Context, now time.Time) (bool, error) {
	filter := taskstate.Audit(now)
	raws, err := query.FindAll(ctx, c.coll, filter, nil, bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}}, checkBatch)
	if err != nil {
		return false, fmt.Errorf("mscheduler: check for unclaimable tasks: %w", err)
	}
	changed := 0
	for _, raw := range raws {
		if ok, err := c.checkOne(ctx, raw, filter, now); err != nil {
			c.loopError(ctx, err)
		} else if ok {
			changed++
		}
	}
	return len(raws) == checkBatch && changed > 0, nil
}

// checkOne repairs one document the audit found, or sets it invalid; it
// says whether it wrote.
func (c *Consumer[P, R]) checkOne(ctx context.Context, raw bson.Raw, audit bson.D, now time.Time) (bool, error) {
	if filter, update := taskstate.Repair(raw, now); update != nil {
		res, err := c.coll.UpdateOne(ctx, append(filter, audit...), update)
		if err != nil {
			return false, fmt.Errorf("mscheduler: repair %s: %w", describeID(raw), err)
		}
		if res.MatchedCount > 0 {
			c.log.Warn("task document repaired: a field bound to its status contradicted it", "key", describeID(raw), "update", fmt.Sprint(update))
		}
		return res.MatchedCount > 0, nil
	}
	prob := inspect(raw)
	if prob == nil { // changed since it was found, or a problem no field names
		return false, nil
	}
	q := newQuarantine(raw, prob, taskstate.FoundByCheck)
	q.extra = audit
	return c.quarantine(ctx, q)
}
