package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// sweepBatch bounds the tasks one sweep looks at.
const sweepBatch = 50

// sweepSkipFor is how long a sweep leaves out a task on which none of its
// writes applied (it changed between the read and the write, over and
// over): so that no set of such tasks fills every batch and keeps the
// sweep from the others.
const sweepSkipFor = time.Minute

// next_expiry is a lower bound of the leases held on a task: a claim lowers
// it with $min, a ping of the only holder sets it exactly, and pings of
// tasks with several holders leave it behind. A sweep therefore finds every
// task where a lease may have lapsed with one indexed range query, frees
// the runs whose lease really lapsed, and raises a stale bound. Every task
// it reads leaves its range: its lapsed runs expired, its bound raised or
// removed, or, when it cannot be swept as stored, set invalid.

// sweepIfDue runs a sweep when its time has come, run by the claim loop.
func (c *Consumer[P, R]) sweepIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.sweepAt) {
		return
	}
	interval := jitter(c.spreadOut(c.cfg.SweepInterval, st.peers))
	st.sweepAt = now.Add(interval)
	next, err := c.sweep(ctx, st, now, st.sweepAt)
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

// sweep reads, with one query, the tasks whose next_expiry falls before
// horizon, earliest first; frees the runs whose lease lapsed before now; and
// returns the earliest next_expiry still ahead, when the next sweep is due.
func (c *Consumer[P, R]) sweep(ctx context.Context, st *claimState, now, horizon time.Time) (time.Time, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: fNextExpiry, Value: 1}}).
		SetLimit(sweepBatch).
		SetProjection(bson.D{{Key: fRuns, Value: 0}, {Key: fParams, Value: 0}})
	filter := bson.D{{Key: fNextExpiry, Value: op("$lte", horizon)}}
	if skipped := st.sweepSkips.ids(now); len(skipped) > 0 {
		filter = append(filter, bson.E{Key: fID, Value: op("$nin", skipped)})
	}
	cur, err := c.coll.Find(ctx, filter, opts)
	if err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	progress := false
	for _, raw := range raws {
		if next, ok := raw.Lookup(fNextExpiry).TimeOK(); ok && !next.Before(now) {
			return next, nil
		}
		wrote, err := c.sweepTask(ctx, raw, now)
		if err != nil {
			c.loopError(ctx, err)
		}
		if !wrote {
			st.sweepSkips.add(raw.Lookup(fID), now.Add(sweepSkipFor))
		}
		progress = progress || wrote
	}
	if len(raws) == sweepBatch && progress {
		return now, nil // a full batch of lapsed leases: sweep again at once
	}
	return time.Time{}, nil
}

// sweepTask expires the task's lapsed runs, or raises its stale
// next_expiry, or sets it invalid when it cannot be swept as stored. It
// reports whether a write applied.
func (c *Consumer[P, R]) sweepTask(ctx context.Context, raw bson.Raw, now time.Time) (bool, error) {
	t, probs := stored.DecodeFields(raw)
	for _, prob := range probs {
		if prob.Field == fHolders || strings.HasPrefix(prob.Field, fHolders+".") || prob.Field == stored.WholeDocument {
			// Its runs cannot be told apart: out of the sweep's range, set
			// invalid. Its holders, if any live, end their runs themselves.
			return c.quarantine(ctx, newQuarantine(raw, prob, taskstate.FoundAtSweep))
		}
	}
	wrote, lapsed := false, 0
	var earliest time.Time // the earliest lease still valid
	for workerID, h := range t.Holders {
		if lease := effectiveLease(h, fromMS(t.WorkerTimeoutMS)); !lease.Before(now) {
			if earliest.IsZero() || lease.Before(earliest) {
				earliest = lease
			}
			continue
		}
		lapsed++
		ok, err := c.expire(ctx, raw, t, workerID, h, now)
		if err != nil {
			c.loopError(ctx, err)
		}
		wrote = wrote || ok
	}
	if wrote {
		// The task's next_expiry moved with the writes, or is still due:
		// the next sweep sees the truth.
		c.wake()
		return true, nil
	}
	if lapsed == 0 {
		return c.repairExpiry(ctx, raw, earliest)
	}
	return false, nil // every expiry missed: the task moved meanwhile
}

func expiredRecord(workerID string, h holder, lease, now time.Time, planned *time.Time) runRecord {
	return runRecord{
		RunID: h.Run, WorkerID: workerID, Started: h.Started, LeaseUntil: lease,
		Finished: now, Outcome: OutcomeExpired, Planned: planned,
		Error: fmt.Sprintf("lease expired at %s: worker stopped pinging", lease.UTC().Format(time.RFC3339Nano)),
	}
}

// expire records a lapsed run as expired and frees its slot, fenced on the
// run and on its lease being the lapsed one read (no ping since). A task
// whose run end the server refuses (a field of the wrong type) has the run
// ended and is set invalid. It reports whether a write applied.
func (c *Consumer[P, R]) expire(ctx context.Context, raw bson.Raw, t *taskDoc, workerID string, h holder, now time.Time) (bool, error) {
	lease := effectiveLease(h, fromMS(t.WorkerTimeoutMS))
	end := &runend.End{Key: t.Key, End: taskstate.End{
		ID:            t.RawID,
		WorkerID:      workerID,
		Fence:         taskstate.LeaseFence(t.RawID, workerID, h.Run, h.LeaseUntil),
		Record:        expiredRecord(workerID, h, lease, now, t.Planned()),
		MaxFailedRuns: t.MaxFailedRuns,
		Seen:          taskstate.Seen{Status: t.Status, Running: t.Running, Free: t.Free, FailedRuns: t.FailedRuns},
		Now:           now,
		RunsKept:      c.cfg.RunsKept,
		Retention:     c.cfg.Retention.policy(),
		Advance:       newPlanAdvance(t, h.Started, now),
	}}
	err := end.Write(ctx, c.coll)
	switch {
	case errors.Is(err, runend.ErrGone): // the holder pinged, ended or was swept meanwhile
		return false, nil
	case runend.Unwritable(err):
		_, prob := problemOf(ctx, c.coll, end.Fence, err)
		q := newQuarantine(raw, prob, taskstate.FoundAtSweep).ending(workerID, h.Run, &end.Record, h.LeaseUntil)
		ok, qerr := c.quarantine(ctx, q)
		if ok {
			c.history.Add(t.Key, end.Record)
		}
		return ok, qerr
	case err != nil:
		return false, err
	}
	c.history.Add(t.Key, end.Record)
	local.ended(namespaceOf(c.coll), t.Key)
	c.log.Info("run expired; slot freed", "key", t.Key, "run_id", h.Run, "holder", workerID)
	c.emit(Event{Kind: EventExpired, Key: t.Key, RunID: h.Run, WorkerID: workerID})
	return true, nil
}

// repairExpiry raises a stale next_expiry to the earliest lease still held,
// or removes it from a task nobody holds (see taskstate.RepairExpiry). It
// reports whether the write applied.
func (c *Consumer[P, R]) repairExpiry(ctx context.Context, raw bson.Raw, earliest time.Time) (bool, error) {
	filter, update := taskstate.RepairExpiry(raw.Lookup(fID), raw.Lookup(fRev), earliest)
	res, err := c.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, fmt.Errorf("mscheduler: sweep %s: %w", describeID(raw), err)
	}
	return res.MatchedCount > 0, nil
}

// sweepSkipList holds the tasks the sweep leaves out for a while, by _id
// as read; it is bounded and forgets each entry when it expires. It
// belongs to the claim loop.
type sweepSkipList []sweepSkip

type sweepSkip struct {
	id    bson.RawValue
	until time.Time
}

func (l *sweepSkipList) add(id bson.RawValue, until time.Time) {
	if len(*l) >= maxSkipped {
		*l = (*l)[1:]
	}
	*l = append(*l, sweepSkip{id, until})
}

// ids returns the _ids still left out at now, forgetting the others.
func (l *sweepSkipList) ids(now time.Time) bson.A {
	left := (*l)[:0]
	var out bson.A
	for _, s := range *l {
		if now.Before(s.until) {
			left = append(left, s)
			out = append(out, s.id)
		}
	}
	*l = left
	return out
}
