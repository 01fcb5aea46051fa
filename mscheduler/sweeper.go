package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// sweepBatch bounds the tasks one sweep looks at.
const sweepBatch = 50

// next_expiry is a lower bound of the leases held on a task: a claim lowers
// it with $min, a ping of the only holder sets it exactly, and pings of
// tasks with several holders leave it behind. A sweep therefore finds every
// task where a lease may have lapsed with one indexed range query, frees
// the runs whose lease really lapsed, and raises a stale bound.

// sweepIfDue runs a sweep when its time has come, run by the claim loop.
func (c *Consumer[P, R]) sweepIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.sweepAt) {
		return
	}
	interval := jitter(c.cfg.SweepInterval)
	st.sweepAt = now.Add(interval)
	next, err := c.sweep(ctx, now, st.sweepAt)
	// The interval counts from the sweep's end: a slow sweep (a slow
	// server, many lapsed leases) must leave time for claims.
	st.sweepAt = c.clock.Now().Add(interval)
	if err != nil {
		c.loopError(ctx, err)
		return
	}
	if !next.IsZero() && next.Before(st.sweepAt) {
		st.sweepAt = next
	}
}

type sweptTask struct {
	State         taskState         `bson:",inline"`
	Key           string            `bson:"key"`
	Rev           int64             `bson:"rev"`
	MaxFailedRuns int               `bson:"max_failed_runs"`
	NextExpiry    time.Time         `bson:"next_expiry"`
	Holders       map[string]holder `bson:"holders"`
	Concurrency   int               `bson:"concurrency"`
	Plan          bson.Raw          `bson:"plan"` // decoded apart: a broken plan must not stop the sweep
}

// plan is the task's plan, or nil if it has none or it does not decode
// (its runs then end as a plain task's).
func (t *sweptTask) plan() *planDoc {
	if len(t.Plan) == 0 {
		return nil
	}
	var p planDoc
	if err := bson.Unmarshal(t.Plan, &p); err != nil {
		return nil
	}
	return &p
}

// sweep reads, with one query, the tasks whose next_expiry falls before
// horizon, earliest first; frees the runs whose lease lapsed before now; and
// returns the earliest next_expiry still ahead, when the next sweep is due.
func (c *Consumer[P, R]) sweep(ctx context.Context, now, horizon time.Time) (time.Time, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: fNextExpiry, Value: 1}}).
		SetLimit(sweepBatch).
		SetProjection(bson.D{
			{Key: fKey, Value: 1}, {Key: fRev, Value: 1}, {Key: fMaxFailedRuns, Value: 1}, {Key: fHolders, Value: 1},
			{Key: fNextExpiry, Value: 1}, {Key: fStatus, Value: 1}, {Key: fRunning, Value: 1}, {Key: fFree, Value: 1},
			{Key: fFailedRuns, Value: 1}, {Key: fConcurrency, Value: 1}, {Key: fPlan, Value: 1},
		})
	cur, err := c.coll.Find(ctx, bson.D{{Key: fNextExpiry, Value: op("$lte", horizon)}}, opts)
	if err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	for _, raw := range raws {
		var t sweptTask
		if err := bson.Unmarshal(raw, &t); err != nil {
			key, _ := raw.Lookup(fID).StringValueOK()
			c.loopError(ctx, fmt.Errorf("mscheduler: sweep: task %q cannot be decoded: %w", key, err))
			continue
		}
		if !t.NextExpiry.Before(now) {
			return t.NextExpiry, nil
		}
		if err := c.sweepTask(ctx, t, now); err != nil {
			c.loopError(ctx, err)
		}
	}
	if len(raws) == sweepBatch {
		return now, nil // a full batch of lapsed leases: sweep again at once
	}
	return time.Time{}, nil
}

func (c *Consumer[P, R]) sweepTask(ctx context.Context, t sweptTask, now time.Time) error {
	lapsed := 0
	var earliest time.Time // the earliest lease still valid
	for workerID, h := range t.Holders {
		if !h.LeaseUntil.Before(now) {
			if earliest.IsZero() || h.LeaseUntil.Before(earliest) {
				earliest = h.LeaseUntil
			}
			continue
		}
		lapsed++
		if err := c.expire(ctx, t, workerID, h, now); err != nil {
			c.loopError(ctx, err)
		}
	}
	if lapsed > 0 {
		// Whatever the writes did, the task's next_expiry moved with them
		// or is still due: the next sweep sees the truth.
		c.wake()
		return nil
	}
	return c.repairExpiry(ctx, t, earliest)
}

// expire records a lapsed run as expired and frees its slot, fenced on the
// run and on its lease still being lapsed.
func (c *Consumer[P, R]) expire(ctx context.Context, t sweptTask, workerID string, h holder, now time.Time) error {
	end := &runEnd{
		key:      t.Key,
		workerID: workerID,
		fence:    expiredFence(t.Key, workerID, h.Run, now),
		record: runRecord{
			RunID: h.Run, WorkerID: workerID, Started: h.Started, LeaseUntil: h.LeaseUntil,
			Finished: now, Outcome: OutcomeExpired, Planned: (&taskDoc{Plan: t.plan()}).planned(),
			Error: fmt.Sprintf("lease expired at %s: worker stopped pinging", h.LeaseUntil.UTC().Format(time.RFC3339Nano)),
		},
		maxFailedRuns: t.MaxFailedRuns,
		seen:          t.State,
		now:           now,
		runsKept:      c.cfg.RunsKept,
		advance:       newPlanAdvance(&taskDoc{Plan: t.plan(), Concurrency: t.Concurrency}, h.Started, now),
	}
	err := end.write(ctx, c.coll)
	switch {
	case errors.Is(err, errRunGone): // the holder pinged, ended or was swept meanwhile
		return nil
	case err != nil:
		return err
	}
	c.log.Info("run expired; slot freed", "key", t.Key, "run_id", h.Run, "holder", workerID)
	c.emit(Event{Kind: EventExpired, Key: t.Key, RunID: h.Run, WorkerID: workerID})
	return nil
}

// repairExpiry raises a stale next_expiry to the earliest lease still held,
// or removes it from a task nobody holds. It is fenced on rev, which every
// claim and run end moves, so it never hides a lease taken since the read.
func (c *Consumer[P, R]) repairExpiry(ctx context.Context, t sweptTask, earliest time.Time) error {
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: fNextExpiry, Value: ""}}}}
	if !earliest.IsZero() {
		update = bson.D{{Key: "$set", Value: bson.D{{Key: fNextExpiry, Value: earliest}}}}
	}
	_, err := c.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: t.Key}, {Key: fRev, Value: t.Rev}}, update)
	if err != nil {
		return fmt.Errorf("mscheduler: sweep %q: %w", t.Key, err)
	}
	return nil
}
