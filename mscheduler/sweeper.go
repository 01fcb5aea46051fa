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
	interval := jitter(c.spreadOut(c.cfg.SweepInterval, st.peers))
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
	Rev           bson.RawValue     `bson:"rev"` // fenced on as stored, whatever its type
	MaxFailedRuns int               `bson:"max_failed_runs"`
	NextExpiry    time.Time         `bson:"next_expiry"`
	Holders       map[string]holder `bson:"holders"`
	Concurrency   int               `bson:"concurrency"`
	WorkerTimeout int64             `bson:"worker_timeout_ms"`
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
// A task that cannot be swept as stored is set invalid, so that it leaves
// the sweep's range instead of filling every batch.
func (c *Consumer[P, R]) sweep(ctx context.Context, now, horizon time.Time) (time.Time, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: fNextExpiry, Value: 1}}).
		SetLimit(sweepBatch).
		SetProjection(bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}})
	cur, err := c.coll.Find(ctx, bson.D{{Key: fNextExpiry, Value: op("$lte", horizon)}}, opts)
	if err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	progress := false
	for _, raw := range raws {
		var t sweptTask
		if err := bson.Unmarshal(raw, &t); err != nil {
			progress = c.sweepUnreadable(ctx, raw, now) || progress
			continue
		}
		if t.Key == "" {
			t.Key, _ = raw.Lookup(fID).StringValueOK()
		}
		if !t.NextExpiry.Before(now) {
			return t.NextExpiry, nil
		}
		done, err := c.sweepTask(ctx, t, raw, now)
		if err != nil {
			c.loopError(ctx, err)
		}
		progress = progress || done
	}
	if len(raws) == sweepBatch && progress {
		return now, nil // a full batch of lapsed leases: sweep again at once
	}
	return time.Time{}, nil
}

// sweepUnreadable handles a task whose fields the sweep needs do not decode:
// its lapsed runs are ended and it is set invalid, naming the field. It
// reports whether it wrote.
func (c *Consumer[P, R]) sweepUnreadable(ctx context.Context, raw bson.Raw, now time.Time) bool {
	key, _ := raw.Lookup(fID).StringValueOK()
	prob := inspect(raw)
	if prob == nil {
		prob = &problem{field: "(document)", reason: "cannot be swept as stored"}
	}
	var holders map[string]holder
	if err := raw.Lookup(fHolders).Unmarshal(&holders); err == nil {
		wrote := false
		for workerID, h := range holders {
			if h.LeaseUntil.Before(now) {
				rec := expiredRecord(workerID, h, h.LeaseUntil, now, nil)
				q := &quarantine{key: key, filter: leaseFence(key, workerID, h.Run, h.LeaseUntil), raw: raw, prob: prob, found: foundAtSweep, holder: workerID, run: &rec}
				ok, err := c.quarantine(ctx, q)
				if err != nil {
					c.loopError(ctx, err)
				}
				if ok {
					c.history.add(key, rec)
				}
				wrote = wrote || ok
			}
		}
		if wrote {
			return true
		}
	}
	// No lapsed run to end (or holders itself is broken): take the task out
	// of the sweep's range. Its holders, if any, end their runs themselves.
	q := &quarantine{key: key, filter: asRead(raw), raw: raw, prob: prob, found: foundAtSweep}
	ok, err := c.quarantine(ctx, q)
	if err != nil {
		c.loopError(ctx, err)
		return false
	}
	if ok {
		_, err = c.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: raw.Lookup(fID)}, {Key: fStatus, Value: StatusInvalid}}, bson.D{{Key: "$unset", Value: bson.D{{Key: fNextExpiry, Value: ""}}}})
		if err != nil {
			c.loopError(ctx, fmt.Errorf("mscheduler: sweep %q: %w", key, err))
		}
	}
	return ok
}

// sweepTask expires the task's lapsed runs, or raises its stale
// next_expiry. It reports whether it wrote anything.
func (c *Consumer[P, R]) sweepTask(ctx context.Context, t sweptTask, raw bson.Raw, now time.Time) (bool, error) {
	lapsed := 0
	var earliest time.Time // the earliest lease still valid
	for workerID, h := range t.Holders {
		if lease := effectiveLease(h, fromMS(t.WorkerTimeout)); !lease.Before(now) {
			if earliest.IsZero() || lease.Before(earliest) {
				earliest = lease
			}
			continue
		}
		lapsed++
		if err := c.expire(ctx, t, raw, workerID, h, now); err != nil {
			c.loopError(ctx, err)
		}
	}
	if lapsed > 0 {
		// Whatever the writes did, the task's next_expiry moved with them
		// or is still due: the next sweep sees the truth.
		c.wake()
		return true, nil
	}
	return true, c.repairExpiry(ctx, t, earliest)
}

func expiredRecord(workerID string, h holder, lease, now time.Time, planned *time.Time) runRecord {
	return runRecord{
		RunID: h.Run, WorkerID: workerID, Started: h.Started, LeaseUntil: lease,
		Finished: now, Outcome: OutcomeExpired, Planned: planned,
		Error: fmt.Sprintf("lease expired at %s: worker stopped pinging", lease.UTC().Format(time.RFC3339Nano)),
	}
}

// expire records a lapsed run as expired and frees its slot, fenced on the
// run and on its lease being the lapsed one read (no ping since). A task whose run end the server
// refuses (a field of the wrong type) has the run ended and is set invalid.
func (c *Consumer[P, R]) expire(ctx context.Context, t sweptTask, raw bson.Raw, workerID string, h holder, now time.Time) error {
	plan := t.plan()
	end := &runEnd{
		key:           t.Key,
		workerID:      workerID,
		fence:         leaseFence(t.Key, workerID, h.Run, h.LeaseUntil),
		record:        expiredRecord(workerID, h, effectiveLease(h, fromMS(t.WorkerTimeout)), now, (&taskDoc{Plan: plan}).planned()),
		maxFailedRuns: t.MaxFailedRuns,
		seen:          t.State,
		now:           now,
		runsKept:      c.cfg.RunsKept,
		retention:     c.cfg.Retention,
		advance:       newPlanAdvance(&taskDoc{Plan: plan, Concurrency: t.Concurrency}, h.Started, now),
	}
	err := end.write(ctx, c.coll)
	switch {
	case errors.Is(err, errRunGone): // the holder pinged, ended or was swept meanwhile
		return nil
	case unwritable(err):
		_, prob := problemOf(ctx, c.coll, end.fence, err)
		q := &quarantine{key: t.Key, filter: end.fence, raw: raw, prob: prob, found: foundAtSweep, holder: workerID, run: &end.record}
		ok, qerr := c.quarantine(ctx, q)
		if ok {
			c.history.add(t.Key, end.record)
		}
		return qerr
	case err != nil:
		return err
	}
	c.history.add(t.Key, end.record)
	local.ended(namespaceOf(c.coll), t.Key)
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
	rev := bson.E{Key: fRev, Value: t.Rev}
	if t.Rev.Type == 0 {
		rev.Value = op("$exists", false)
	}
	_, err := c.coll.UpdateOne(ctx, bson.D{{Key: fID, Value: t.Key}, rev}, update)
	if err != nil {
		return fmt.Errorf("mscheduler: sweep %q: %w", t.Key, err)
	}
	return nil
}
