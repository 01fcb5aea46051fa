package upkeep

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

// Work that one worker at a time does for a collection: delete finished
// tasks and run records past their retention where the server has no TTL
// indexes, and write the history records that a worker which died (or was
// short of time) left unwritten. Each worker tries, every
// MaintenanceInterval, to take or renew a lease on the document
// {_id: "maintenance"} in the collection's metadata (<name>.meta); the one
// that holds it does the work, so that N workers cost the server one pass.

// reconcileAfter is how long a task's unlogged list is left to the worker
// that ended the run before the maintenance pass writes the records itself
// (it would be harmless sooner: both writes are idempotent).
const reconcileAfter = 10 * time.Second

// maintenanceBatches bounds the deletes of one pass: the rest waits for
// the next one.
const maintenanceBatches = 10

// ExpireIndex is the name of the index that deletes documents at their
// expire_at, where the server has TTL indexes; without them it serves the
// maintenance pass's deletes.
const ExpireIndex = "expire"

// MetaCollection is where a task collection's metadata documents go.
func MetaCollection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + ".meta")
}

// TakeMaintenance takes the lease, for leaseFor, if it is free or lapsed, or renews it if
// this worker holds it; it reports whether this worker holds it now.
func (w *Worker) TakeMaintenance(ctx context.Context, now time.Time, leaseFor time.Duration) (bool, error) {
	filter := bson.D{{Key: stored.FID, Value: stored.MaintenanceID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "lease_until", Value: taskstate.Op("$lt", now)}},
		bson.D{{Key: "holder", Value: w.ID}},
	}}}
	lease := stored.Lease{Holder: w.ID, LeaseUntil: now.Add(leaseFor)}
	update := bson.D{{Key: "$set", Value: lease}}
	_, err := MetaCollection(w.Coll).UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	switch {
	case mongo.IsDuplicateKeyError(err): // another worker holds it, or it is broken
		return w.replaceBrokenLease(ctx, lease)
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
func (w *Worker) replaceBrokenLease(ctx context.Context, lease stored.Lease) (bool, error) {
	meta := MetaCollection(w.Coll)
	raw, err := meta.FindOne(ctx, bson.D{{Key: stored.FID, Value: stored.MaintenanceID}}).Raw()
	if err != nil {
		return false, nil // gone or unreadable now: the next try sees
	}
	_, prob := stored.LeaseOf(raw)
	if prob == nil {
		return false, nil // another worker holds it
	}
	broken := bson.D{{Key: stored.FID, Value: stored.MaintenanceID}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "holder", Value: taskstate.Op("$not", taskstate.Op("$type", "string"))}},
		bson.D{{Key: "lease_until", Value: taskstate.Op("$not", taskstate.Op("$type", "date"))}},
	}}}
	res, err := meta.ReplaceOne(ctx, broken, lease)
	if err != nil {
		return false, fmt.Errorf("mscheduler: replace the maintenance lease (%v): %w", prob, err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	w.Log.Warn("the maintenance lease document could not be read; replaced", "field", prob.Field, "reason", prob.Reason)
	return true, nil
}

// TTL says whether the server deletes documents past their retention by
// itself, once Known; it belongs to the maintenance holder's loop.
type TTL struct{ On, Known bool }

// Maintain does one maintenance pass: the deletes past retention where
// the server has no TTL index, and the history records left unwritten.
func (w *Worker) Maintain(ctx context.Context, now time.Time, ttl *TTL) {
	if !ttl.Known {
		on, err := hasTTL(ctx, w.Coll)
		if err != nil {
			w.Report.Error(err)
			return
		}
		ttl.On, ttl.Known = on, true
	}
	if !ttl.On {
		for _, coll := range []*mongo.Collection{w.Coll, history.Collection(w.Coll)} {
			n, err := deleteExpired(ctx, coll, coll != w.Coll, now)
			if err != nil {
				w.Report.Error(err)
			} else if n > 0 {
				w.Log.Info("deleted past their retention", "collection", coll.Name(), "deleted", n)
			}
		}
	}
	n, err := w.writeUnlogged(ctx, now)
	if err != nil {
		w.Report.Error(err)
	} else if n > 0 {
		w.Log.Info("wrote run history records left unwritten", "records", n)
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
		if s.Name == ExpireIndex {
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
	return query.DeleteAll(ctx, coll, filter, maintenanceBatches)
}

// writeUnlogged writes the history records that tasks mark as unlogged,
// from the records the tasks keep, and removes the marks: every mark older
// than reconcileAfter, whatever the task's last change (a busy recurring
// task is always changing, and a mark its dead worker left must not wait
// for it to rest).
func (w *Worker) writeUnlogged(ctx context.Context, now time.Time) (int, error) {
	filter := bson.D{{Key: stored.FUnlogged, Value: taskstate.Op("$gt", bson.D{})}}
	tasks, err := query.FindAll(ctx, w.Coll, filter, nil, history.MarksProjection, query.DeleteBatch)
	if err != nil {
		return 0, fmt.Errorf("mscheduler: find unwritten run history: %w", err)
	}
	return history.WriteMarked(ctx, w.Coll, tasks, w.Retention, now, reconcileAfter)
}
