package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// MaintenanceIntervalDefault is the default ConsumerConfig.MaintenanceInterval.
const MaintenanceIntervalDefault = time.Minute

// Work that one worker at a time does for a collection: delete finished
// tasks and run records past their retention where the server has no TTL
// indexes, and write the history records that a worker which died (or was
// short of time) left unwritten. Each worker tries, every
// MaintenanceInterval, to take or renew a lease on the document
// {_id: "maintenance"} in the collection's metadata (<name>.meta); the one
// that holds it does the work, so that N workers cost the server one pass.

const maintenanceID = "maintenance"

// reconcileAfter is how long a task's unlogged list is left to the worker
// that ended the run before the maintenance pass writes the records itself
// (it would be harmless sooner: both writes are idempotent).
const reconcileAfter = 10 * time.Second

// maintenanceBatches bounds the deletes of one pass: the rest waits for
// the next one.
const maintenanceBatches = 10

type maintenanceLease = stored.Lease

// maintainIfDue takes or renews the maintenance lease when its time has
// come, and does the pass if this worker holds it. Run by the claim loop.
func (c *Consumer[P, R]) maintainIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.maintainAt) {
		return
	}
	st.maintainAt = now.Add(jitter(c.cfg.MaintenanceInterval))
	leader, err := c.takeMaintenance(ctx, now)
	c.leader.Store(leader)
	if err != nil {
		c.loopError(ctx, err)
		return
	}
	if leader {
		c.maintain(ctx, now, st)
		alive := c.aliveWindow(now)
		if err := c.forgetPeers(ctx, st.peersGone, &alive); err != nil {
			c.loopError(ctx, err)
		}
	}
}

// takeMaintenance takes the lease if it is free or lapsed, or renews it if
// this worker holds it; it reports whether this worker holds it now.
func (c *Consumer[P, R]) takeMaintenance(ctx context.Context, now time.Time) (bool, error) {
	filter := bson.D{{Key: fID, Value: maintenanceID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "lease_until", Value: op("$lt", now)}},
		bson.D{{Key: "holder", Value: c.cfg.WorkerID}},
	}}}
	lease := maintenanceLease{Holder: c.cfg.WorkerID, LeaseUntil: now.Add(3 * c.cfg.MaintenanceInterval)}
	update := bson.D{{Key: "$set", Value: lease}}
	_, err := metaCollection(c.coll).UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	switch {
	case mongo.IsDuplicateKeyError(err): // another worker holds it, or it is broken
		return c.replaceBrokenLease(ctx, lease)
	case err != nil:
		return false, fmt.Errorf("mscheduler: take the maintenance lease: %w", err)
	}
	return true, nil
}

// replaceBrokenLease replaces a maintenance lease document that no lease's
// filter can match (a lease_until that is not a date, no holder, content
// replaced by hand): left as it is, no worker would ever take the lease
// again, and the check, retention and the history repair would stop for
// good. The replacement is fenced on the document still being broken, so
// that a lease another worker took meanwhile stands. It reports whether
// this worker holds the lease now.
func (c *Consumer[P, R]) replaceBrokenLease(ctx context.Context, lease maintenanceLease) (bool, error) {
	meta := metaCollection(c.coll)
	raw, err := meta.FindOne(ctx, bson.D{{Key: fID, Value: stored.MaintenanceID}}).Raw()
	if err != nil {
		return false, nil // gone or unreadable now: the next try sees
	}
	_, prob := stored.LeaseOf(raw)
	if prob == nil {
		return false, nil // another worker holds it
	}
	broken := bson.D{{Key: fID, Value: stored.MaintenanceID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "holder", Value: op("$not", op("$type", "string"))}},
		bson.D{{Key: "lease_until", Value: op("$not", op("$type", "date"))}},
	}}}
	res, err := meta.ReplaceOne(ctx, broken, lease)
	if err != nil {
		return false, fmt.Errorf("mscheduler: replace the maintenance lease (%v): %w", prob, err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	c.log.Warn("the maintenance lease document could not be read; replaced", "field", prob.Field, "reason", prob.Reason)
	return true, nil
}

// MaintenanceLeader reports whether this consumer held the collection's
// maintenance lease at its last try.
func (c *Consumer[P, R]) MaintenanceLeader() bool { return c.leader.Load() }

// maintain does one maintenance pass.
func (c *Consumer[P, R]) maintain(ctx context.Context, now time.Time, st *claimState) {
	if !st.ttlKnown {
		ttl, err := hasTTL(ctx, c.coll)
		if err != nil {
			c.loopError(ctx, err)
			return
		}
		st.ttl, st.ttlKnown = ttl, true
	}
	if !st.ttl {
		for _, coll := range []*mongo.Collection{c.coll, historyCollection(c.coll)} {
			n, err := deleteExpired(ctx, coll, coll != c.coll, now)
			if err != nil {
				c.loopError(ctx, err)
			} else if n > 0 {
				c.log.Info("deleted past their retention", "collection", coll.Name(), "deleted", n)
			}
		}
	}
	n, err := c.writeUnlogged(ctx, now)
	if err != nil {
		c.loopError(ctx, err)
	} else if n > 0 {
		c.log.Info("wrote run history records left unwritten", "records", n)
	}
}

// hasTTL reports whether the server deletes expired documents by itself:
// the expire index of coll was created as a TTL index.
func hasTTL(ctx context.Context, coll *mongo.Collection) (bool, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return false, fmt.Errorf("mscheduler: list indexes of %s: %w", coll.Name(), err)
	}
	var specs []struct {
		Name               string `bson:"name"`
		ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
	}
	if err := cur.All(ctx, &specs); err != nil {
		return false, fmt.Errorf("mscheduler: list indexes of %s: %w", coll.Name(), err)
	}
	for _, s := range specs {
		if s.Name == expireIndex {
			return s.ExpireAfterSeconds != nil, nil
		}
	}
	return false, nil
}

// deleteExpired deletes, in a few bounded batches, the documents whose
// expire_at has passed (served by the expire index).
func deleteExpired(ctx context.Context, coll *mongo.Collection, history bool, now time.Time) (int64, error) {
	filter := taskstate.ExpiredRecords(now)
	if !history {
		filter = taskstate.Expired(now)
	}
	var total int64
	for range maintenanceBatches {
		n, err := deleteBatchOnce(ctx, coll, filter)
		total += n
		if err != nil || n < deleteBatch {
			return total, err
		}
	}
	return total, nil
}

// writeUnlogged writes the history records that tasks mark as unlogged,
// from the records the tasks keep, and removes the marks: every mark older
// than reconcileAfter, whatever the task's last change (a busy recurring
// task is always changing, and a mark its dead worker left must not wait
// for it to rest).
func (c *Consumer[P, R]) writeUnlogged(ctx context.Context, now time.Time) (int, error) {
	filter := bson.D{{Key: fUnlogged, Value: op("$gt", bson.D{})}}
	tasks, err := query.FindAll(ctx, c.coll, filter, nil, history.MarksProjection, deleteBatch)
	if err != nil {
		return 0, fmt.Errorf("mscheduler: find unwritten run history: %w", err)
	}
	return history.WriteMarked(ctx, c.coll, tasks, c.cfg.Retention.policy(), now, reconcileAfter)
}
