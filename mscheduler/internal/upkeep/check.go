package upkeep

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// CheckBatch bounds the documents one check looks at; a full batch that
// changed something is followed by another at once.
const CheckBatch = 100

// The claim query only matches well-formed documents, so a document that a
// person added or edited into a shape it cannot match would wait for ever,
// silently, while it looks pending (see taskstate.Audit). The check finds
// such documents, repairs the fields bound to their status that are the
// library's to repair, and sets the others invalid with the reason, so
// that the one query for invalid tasks shows them too.

// Check repairs or sets invalid the documents of one batch the audit
// finds, each fenced on still being as read and still found, so that a
// repair made meanwhile stands. It says whether another batch may wait.
func (w *Worker) Check(ctx context.Context, now time.Time) (bool, error) {
	filter := taskstate.Audit(now)
	raws, err := query.FindAll(ctx, w.Coll, filter, nil, bson.D{{Key: stored.FRuns, Value: 0}, {Key: stored.FParams, Value: 0}}, CheckBatch)
	if err != nil {
		return false, fmt.Errorf("mscheduler: check for unclaimable tasks: %w", err)
	}
	changed := 0
	for _, raw := range raws {
		if ok, err := w.checkOne(ctx, raw, filter, now); err != nil {
			w.Report.Error(err)
		} else if ok {
			changed++
		}
	}
	return len(raws) == CheckBatch && changed > 0, nil
}

// checkOne repairs one document the audit found, or sets it invalid; it
// says whether it wrote.
func (w *Worker) checkOne(ctx context.Context, raw bson.Raw, audit bson.D, now time.Time) (bool, error) {
	if filter, update := taskstate.Repair(raw, now); update != nil {
		res, err := w.Coll.UpdateOne(ctx, append(filter, audit...), update)
		if err != nil {
			return false, fmt.Errorf("mscheduler: repair %s: %w", stored.IDString(raw.Lookup(stored.FID)), err)
		}
		if res.MatchedCount > 0 {
			w.Log.Warn("task document repaired: a field bound to its status contradicted it", "key", stored.IDString(raw.Lookup(stored.FID)), "update", fmt.Sprint(update))
		}
		return res.MatchedCount > 0, nil
	}
	prob := w.Inspect(raw)
	if prob == nil { // changed since it was found, or a problem no field names
		return false, nil
	}
	q := NewQuarantine(raw, prob, taskstate.FoundByCheck)
	q.Extra = audit
	return w.Quarantine(ctx, q)
}
