package upkeep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// SweepBatch bounds the tasks one sweep looks at.
const SweepBatch = 50

// sweepSkipFor is how long a sweep leaves out a task as it read it (the
// same rev and holders) when none of its writes applied, so that no set
// of tasks whose writes never apply fills every batch and keeps the sweep
// from the others. A task that moved since (a claim, a ping, a run end)
// is swept again at once: a skip must never hide the next lapsed lease.
const sweepSkipFor = time.Minute

// next_expiry is a lower bound of the leases held on a task: a claim lowers
// it with $min, a ping of the only holder sets it exactly, and pings of
// tasks with several holders leave it behind. A sweep therefore finds every
// task where a lease may have lapsed with one indexed range query, frees
// the runs whose lease really lapsed, and raises a stale bound. Every task
// it reads leaves its range: its lapsed runs expired, its bound raised or
// removed, or, when it cannot be swept as stored, set invalid.

// Sweep reads, with one query, the tasks whose next_expiry falls before
// horizon, earliest first; frees the runs whose lease lapsed before now; and
// returns the earliest next_expiry still ahead of a task with a holder
// overdue on its pings (see overdue), when the next sweep is due, or zero;
// held says it saw runs whose leases hold still.
//
// The expiries of a sweep are written together, in one command, and only
// those that did not apply are written one by one: on a slow server a
// sweep of many lapsed runs, each its own command, took longer than the
// leases it was there to keep short, and held the upkeep loop meanwhile.
func (w *Worker) Sweep(ctx context.Context, skips *SweepSkips, now, horizon time.Time) (next time.Time, held bool, err error) {
	opts := options.Find().
		SetSort(bson.D{{Key: stored.FNextExpiry, Value: 1}}).
		SetLimit(SweepBatch).
		SetProjection(bson.D{{Key: stored.FRuns, Value: 0}, {Key: stored.FParams, Value: 0}})
	filter := bson.D{{Key: stored.FNextExpiry, Value: taskstate.Op("$lte", horizon)}}
	if skipped := skips.filters(now); len(skipped) > 0 {
		filter = append(filter, bson.E{Key: "$nor", Value: skipped})
	}
	cur, err := w.Coll.Find(ctx, filter, opts)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return time.Time{}, false, fmt.Errorf("mscheduler: sweep: %w", err)
	}
	var plans []*sweepPlan
	for _, raw := range raws {
		if at, ok := raw.Lookup(stored.FNextExpiry).TimeOK(); ok && !at.Before(now) {
			// Read in next_expiry order: this one and all after it hold.
			held = true
			if overdue(raw, now) {
				next = at
				break
			}
			continue
		}
		plans = append(plans, w.planSweep(raw, now))
	}
	w.expireTogether(ctx, plans)
	progress := false
	for _, pl := range plans {
		wrote, err := w.finishSweep(ctx, pl)
		if err != nil {
			// Most likely the server, not the task: the next sweep tries it
			// again.
			w.Report.Error(err)
		} else if !wrote {
			skips.add(pl.raw, now.Add(sweepSkipFor))
		}
		progress = progress || wrote
	}
	if !next.IsZero() {
		return next, true, nil
	}
	if len(raws) == SweepBatch && progress && !held {
		return now, true, nil // a full batch of lapsed leases: sweep again at once
	}
	return time.Time{}, held, nil
}

// overdue says a holder of the task has not renewed its lease for two of
// the task's ping intervals: its worker may be dead, and a sweep should
// come when its lease lapses. A holder that pings on time moves its lease
// ahead of every sweep that comes for it: on a busy collection sweeps
// chasing the first lease to lapse came about once per lease, per
// consumer, and found it renewed each time. A task that cannot be read so
// far is overdue.
func overdue(raw bson.Raw, now time.Time) bool {
	t, probs := stored.DecodeFields(raw)
	if len(probs) > 0 || t.PingIntervalMS <= 0 || len(t.Holders) == 0 {
		return true
	}
	timeout := stored.FromMS(t.WorkerTimeoutMS)
	for _, h := range t.Holders {
		renewed := taskstate.EffectiveLease(h, timeout).Add(-taskstate.RunLease(h, timeout))
		if now.Sub(renewed) > overdueAfter*stored.FromMS(t.PingIntervalMS) {
			return true
		}
	}
	return false
}

// overdueAfter is how many ping intervals without a renewal make a holder
// overdue: one is a ping on its way, or a little late.
const overdueAfter = 2

// sweepPlan is what a sweep does to one task it read: set it invalid, or
// expire its lapsed runs, or raise its stale next_expiry.
type sweepPlan struct {
	raw      bson.Raw
	task     *stored.Task
	problem  *stored.Problem // set: the task cannot be swept as stored
	expiries []*expiry
	earliest time.Time // the earliest lease still valid
}

// expiry is the end of one lapsed run; applied says the sweep's command
// of expiries wrote it.
type expiry struct {
	workerID string
	holder   stored.Holder
	end      *runend.End
	applied  bool
}

// planSweep reads what the sweep does to the task raw.
func (w *Worker) planSweep(raw bson.Raw, now time.Time) *sweepPlan {
	t, probs := stored.DecodeFields(raw)
	if p := stored.HolderDatesProblem(raw); p != nil {
		probs = append(probs, p) // a lease no fence can match
	}
	pl := &sweepPlan{raw: raw, task: t}
	for _, prob := range probs {
		if prob.Field == stored.FHolders || strings.HasPrefix(prob.Field, stored.FHolders+".") || prob.Field == stored.WholeDocument {
			// Its runs cannot be told apart: out of the sweep's range, set
			// invalid. Its holders, if any live, end their runs themselves.
			pl.problem = prob
			return pl
		}
	}
	for workerID, h := range t.Holders {
		lease := taskstate.EffectiveLease(h, stored.FromMS(t.WorkerTimeoutMS))
		if !lease.Before(now) {
			if pl.earliest.IsZero() || lease.Before(pl.earliest) {
				pl.earliest = lease
			}
			continue
		}
		pl.expiries = append(pl.expiries, &expiry{workerID: workerID, holder: h, end: w.expiryEnd(t, workerID, h, now)})
	}
	return pl
}

// expireTogether writes the expiries of the plans in as few commands as
// the bound on statements allows, marking those that applied. One that
// did not (a ping, an end or another sweep came first, or its task moved
// between cases) is left to be written alone, where a miss is sorted out;
// so is every one of a command that failed, whose statements may or may
// not have applied: written alone, an applied one is told from a takeover
// by the record it left.
func (w *Worker) expireTogether(ctx context.Context, plans []*sweepPlan) {
	var batch []*expiry
	var models []mongo.WriteModel
	for _, pl := range plans {
		for _, x := range pl.expiries {
			if c, ok := x.end.Likely(); ok {
				batch = append(batch, x)
				models = append(models, mongo.NewUpdateOneModel().SetFilter(x.end.Filter(c)).SetUpdate(x.end.Update(c)))
			}
		}
	}
	if len(models) < 2 {
		return // alone, each takes the plain path
	}
	for len(models) > 0 {
		n := min(len(models), query.MaxStatements)
		res, err := w.Coll.BulkWrite(ctx, models[:n], options.BulkWrite().SetOrdered(false))
		if err == nil && res.MatchedCount == int64(n) {
			for _, x := range batch[:n] {
				x.applied = true
			}
		}
		batch, models = batch[n:], models[n:]
	}
}

// finishSweep completes the plan of one task: the expiries the command of
// them did not apply, one by one; the records and reports of those that
// applied; or the repair of its bound, or its quarantine. It reports
// whether a write applied.
func (w *Worker) finishSweep(ctx context.Context, pl *sweepPlan) (bool, error) {
	if pl.problem != nil {
		return w.Quarantine(ctx, NewQuarantine(pl.raw, pl.problem, taskstate.FoundAtSweep))
	}
	if len(pl.expiries) == 0 {
		return w.repairExpiry(ctx, pl.raw, pl.earliest)
	}
	wrote := false
	var failed error
	for _, x := range pl.expiries {
		ok, err := true, error(nil)
		if x.applied {
			w.expired(pl.task, x)
		} else {
			ok, err = w.expire(ctx, pl.raw, pl.task, x)
		}
		if err != nil {
			failed = cmp.Or(failed, err)
		}
		wrote = wrote || ok
	}
	if failed != nil && !wrote {
		return false, failed
	}
	if failed != nil {
		w.Report.Error(failed)
	}
	if wrote {
		// The task's next_expiry moved with the writes, or is still due:
		// the next sweep sees the truth.
		w.Report.Wake()
	}
	return wrote, nil // every expiry missed: the task moved meanwhile
}

func expiredRecord(workerID string, h stored.Holder, lease, now time.Time, planned *time.Time, stretched time.Duration) stored.RunRecord {
	return stored.RunRecord{
		RunID: h.Run, WorkerID: workerID, Started: h.Started, LeaseUntil: lease,
		Finished: now, Outcome: stored.OutcomeExpired, Planned: planned, LeaseMS: stretched.Milliseconds(),
		Error: fmt.Sprintf("lease expired at %s: worker stopped pinging", lease.UTC().Format(time.RFC3339Nano)),
	}
}

// expiryEnd is the end of a lapsed run: recorded expired and its slot
// freed, fenced on the run and on its lease being the lapsed one read (no
// ping since).
func (w *Worker) expiryEnd(t *stored.Task, workerID string, h stored.Holder, now time.Time) *runend.End {
	lease := taskstate.EffectiveLease(h, stored.FromMS(t.WorkerTimeoutMS))
	return &runend.End{Key: t.Key, End: taskstate.End{
		ID:            t.RawID,
		WorkerID:      workerID,
		Fence:         taskstate.LeaseFence(t.RawID, workerID, h.Run, h.LeaseUntil),
		Record:        expiredRecord(workerID, h, lease, now, t.Planned(), taskstate.StretchedLease(h, stored.FromMS(t.WorkerTimeoutMS))),
		MaxFailedRuns: t.MaxFailedRuns,
		Seen:          taskstate.Seen{Status: t.Status, Running: t.Running, Free: t.Free, FailedRuns: t.FailedRuns},
		Now:           now,
		RunsKept:      w.RunsKept,
		Retention:     w.Retention,
		Advance:       w.Advance(t, h.Started, now),
	}}
}

// expire writes one expiry alone. A task whose run end the server refuses
// (a field of the wrong type) has the run ended and is set invalid. It
// reports whether a write applied.
func (w *Worker) expire(ctx context.Context, raw bson.Raw, t *stored.Task, x *expiry) (bool, error) {
	end := x.end
	err := end.Write(ctx, w.Coll)
	switch {
	case errors.Is(err, runend.ErrGone): // the holder pinged, ended or was swept meanwhile
		return false, nil
	case runend.Unwritable(err):
		_, prob := w.ProblemOf(ctx, end.Fence, err)
		q := NewQuarantine(raw, prob, taskstate.FoundAtSweep).Ending(x.workerID, x.holder.Run, &end.Record, x.holder.LeaseUntil)
		ok, qerr := w.Quarantine(ctx, q)
		if ok {
			w.History.Add(t.Key, end.Record)
		}
		return ok, qerr
	case err != nil:
		return false, err
	}
	w.expired(t, x)
	return true, nil
}

// expired records and reports an expiry that applied.
func (w *Worker) expired(t *stored.Task, x *expiry) {
	w.History.Add(t.Key, x.end.Record)
	w.Log.Info("run expired; slot freed", "key", t.Key, "run_id", x.holder.Run, "holder", x.workerID)
	w.Report.Expired(t.Key, x.holder.Run, x.workerID, x.end.Record.LeaseUntil)
}

// repairExpiry raises a stale next_expiry to the earliest lease still held,
// or removes it from a task nobody holds (see taskstate.RepairExpiry). It
// reports whether the write applied.
func (w *Worker) repairExpiry(ctx context.Context, raw bson.Raw, earliest time.Time) (bool, error) {
	filter, update := taskstate.RepairExpiry(raw.Lookup(stored.FID), raw.Lookup(stored.FRev), earliest)
	res, err := w.Coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, fmt.Errorf("mscheduler: sweep %s: %w", stored.IDString(raw.Lookup(stored.FID)), err)
	}
	return res.MatchedCount > 0, nil
}

// SweepSkips holds the tasks the sweep leaves out for a while, by _id
// and rev as read; it is bounded and forgets each entry when it expires.
// It belongs to the upkeep loop.
type SweepSkips []sweepSkip

type sweepSkip struct {
	id bson.RawValue
	// asRead are the fields that any claim, ping or run end of the task
	// changes, as read (zero for a field the task lacks).
	rev, holders bson.RawValue
	until        time.Time
}

func (l *SweepSkips) add(raw bson.Raw, until time.Time) {
	if len(*l) >= maxSweepSkips {
		*l = (*l)[1:]
	}
	rev, _ := raw.LookupErr(stored.FRev)
	holders, _ := raw.LookupErr(stored.FHolders)
	*l = append(*l, sweepSkip{id: raw.Lookup(stored.FID), rev: rev, holders: holders, until: until})
}

// filters returns, for a $nor, the tasks still left out at now, each as
// read, forgetting the others.
func (l *SweepSkips) filters(now time.Time) bson.A {
	left := (*l)[:0]
	var out bson.A
	for _, s := range *l {
		if now.Before(s.until) {
			left = append(left, s)
			out = append(out, s.filter())
		}
	}
	*l = left
	return out
}

// filter matches the task as it was read: its rev and holders unchanged.
func (s sweepSkip) filter() bson.D {
	return bson.D{{Key: stored.FID, Value: s.id}, asRead(stored.FRev, s.rev), asRead(stored.FHolders, s.holders)}
}

func asRead(field string, v bson.RawValue) bson.E {
	if v.Type == 0 {
		return bson.E{Key: field, Value: taskstate.Op("$exists", false)}
	}
	return bson.E{Key: field, Value: v}
}

// maxSweepSkips bounds the tasks the sweep leaves out at once; the oldest
// make way.
const maxSweepSkips = 100
