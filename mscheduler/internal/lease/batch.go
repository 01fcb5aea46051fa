package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// A batch of pings renews several runs of this worker in two commands,
// whatever their number: one unordered update with a statement per run,
// each fenced on its run as a lone ping is, then one read of the tasks,
// which tells for each run what its ping would have read. A run whose
// statement matched nothing is told apart by that read: no longer held,
// it was taken away; held with another lease than the one asked, its
// statement guessed the number of holders wrong, and it is pinged alone.

// pingItem is one run's part of a ping.
type pingItem struct {
	run     *Run
	lease   time.Time     // the lease asked for
	length  time.Duration // how long from the ping's sending it runs (see RenewLength)
	attempt int
	sole    bool // the run was its task's only holder at its last ping
}

// newPingItem is r's part of a ping sent at now that renews it by length.
func newPingItem(r *Run, now time.Time, length time.Duration) pingItem {
	return pingItem{run: r, lease: now.Add(length), length: length, attempt: int(r.Attempt.Load()), sole: r.SoleHolder}
}

// stretched is the item's lease length where it is longer than its task's
// worker timeout, which its holder records; else 0.
func (it pingItem) stretched() time.Duration {
	if it.length > it.run.WorkerTimeout {
		return it.length
	}
	return 0
}

// renewStatement is the fenced update that renews one run's lease (see
// taskstate.Renew), in the form for the task's only holder or not.
func (p *Pinger) renewStatement(it pingItem, sole bool) (filter, update bson.D) {
	return taskstate.Renew(it.run.ID, p.workerID, it.run.RunID, it.lease, it.attempt, sole, it.stretched())
}

// pingProjection is what a ping reads back of its task.
func (p *Pinger) pingProjection() bson.D {
	return bson.D{{Key: stored.FStatus, Value: 1}, {Key: stored.FRunning, Value: 1}, {Key: stored.FPingIntervalMS, Value: 1}, {Key: stored.FWorkerTimeoutMS, Value: 1},
		{Key: stored.FWorkerIDs, Value: 1}, {Key: stored.FGroup, Value: 1}}
}

// renewBatch renews the runs of items together; it returns one result per
// item, in order. When the update matched every run, renewed hears of the
// renewals at once, before the read. Once it matched any, the read is
// bounded by the leases the update gave, not by those it renewed: on a slow server the
// update takes most of what was left of them, and a read cancelled then
// would close its connection, which the next ping would wait a new
// handshake for. ctx bounds the update; the read is bounded within loop.
func (p *Pinger) renewBatch(ctx, loop context.Context, items []pingItem, sent time.Time, renewed func([]pingResult)) []pingResult {
	start := time.Now()
	out := make([]pingResult, len(items))
	for i, it := range items {
		out[i] = pingResult{run: it.run, sent: sent, lease: it.lease}
	}
	models := make([]mongo.WriteModel, len(items))
	keys := make(bson.A, 0, len(items))
	for i, it := range items {
		filter, update := p.renewStatement(it, it.sole)
		models[i] = mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
		keys = append(keys, it.run.ID)
	}
	// A statement refused by the server (a field edited into the wrong
	// type) may leave the others applied or not (the development server
	// stops at the first): the read tells which were.
	res, err := p.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if err != nil && !(errors.As(err, &bwe) && bwe.WriteConcernError == nil) {
		return failAll(out, fmt.Errorf("mscheduler: ping %d runs: %w", len(items), err))
	}
	took := time.Since(start)
	for i := range out {
		out[i].took = took
	}
	if err == nil && res.MatchedCount == int64(len(items)) {
		renewed(slices.Clone(out))
		for i := range out {
			out[i].early = true
		}
	}
	if err == nil && res.MatchedCount > 0 {
		// Some leases were renewed; the read tells which.
		var cancel context.CancelFunc
		ctx, cancel = retry.Bounded(loop, earliestLease(items).Sub(p.clock.Now()), errLapsed)
		defer cancel()
	}
	tasks, err := p.readBack(ctx, keys)
	if err != nil {
		return failAll(out, err)
	}
	for i, it := range items {
		raw := tasks[it.run.Key]
		switch readBackOf(raw, p.workerID, it, out[i].early) {
		case runTaken: // reply stays nil
		case runRenewed:
			out[i].reply = decodePingReply(raw)
		case runMissed:
			it.sole = !it.sole
			out[i].reply, out[i].err = p.renew(ctx, it)
		}
	}
	return out
}

// What a batch's read back says of one run.
const (
	runTaken   = iota // no longer held: taken away
	runRenewed        // held with the lease asked, or a later one of its own
	runMissed         // held, but its statement matched nothing: ping it alone
)

// readBackOf tells, from the task raw as read back, what became of the
// run of item; early says the batch's update matched every statement.
// A later lease than asked counts as renewed only then: a later ping of
// the run may have landed before the read (an early batch frees its runs
// for their next ping at once), and pinged alone again the run would have
// its lease written back to the earlier one. Otherwise the later lease is
// not the run's own: it is the claim's placeholder (see
// taskstate.ClaimLease), which the sweep does not go by, and the run,
// whose statement guessed the number of holders wrong, is pinged alone.
func readBackOf(raw bson.Raw, workerID string, item pingItem, early bool) int {
	run, _ := raw.Lookup(stored.FHolders, workerID, stored.HRun).StringValueOK()
	lease, _ := raw.Lookup(stored.FHolders, workerID, stored.HLeaseUntil).DateTimeOK()
	asked := item.lease.UnixMilli()
	switch {
	case raw == nil || run != item.run.RunID:
		return runTaken
	case lease == asked || early && lease > asked:
		return runRenewed
	}
	return runMissed
}

// RenewTogether renews the leases of runs by lengths from now (server
// time) in one batch, as the
// pinger's loop does when several are due: one update of a statement each,
// then one read. It says, for each run, whether it still held its slot
// (a run that did takes its lease), or the error that left it unknown: a
// run found taken away has neither. For a caller that drives a worker a
// step at a time (the engine's Stepper).
func (p *Pinger) RenewTogether(ctx context.Context, runs []*Run, now time.Time, lengths []time.Duration) (held []bool, errs []error) {
	items := make([]pingItem, len(runs))
	for i, r := range runs {
		items[i] = newPingItem(r, now, lengths[i])
	}
	results := p.renewBatch(ctx, ctx, items, now, func([]pingResult) {})
	held, errs = make([]bool, len(results)), make([]error, len(results))
	for i, res := range results {
		switch {
		case res.err == nil && res.reply != nil:
			held[i] = true
			res.run.renewedBy(res.lease, res.lease.Sub(res.sent))
			res.run.SoleHolder = res.reply.Running == 1
		case res.err != nil && res.early:
			// The update matched every run; only the read after it failed.
			held[i] = true
			res.run.renewedBy(res.lease, res.lease.Sub(res.sent))
		case res.err != nil:
			errs[i] = res.err
		}
	}
	return held, errs
}

// readBack reads the pinged tasks as their pings left them, by key.
func (p *Pinger) readBack(ctx context.Context, keys bson.A) (map[string]bson.Raw, error) {
	tasks, err := query.ByID(ctx, p.coll, keys, append(p.pingProjection(), bson.E{Key: stored.HolderPath(p.workerID), Value: 1}))
	if err != nil {
		return nil, fmt.Errorf("mscheduler: ping: %w", err)
	}
	return tasks, nil
}

// earliestLease is the earliest of the leases items ask for.
func earliestLease(items []pingItem) time.Time {
	out := items[0].lease
	for _, it := range items[1:] {
		out = minTime(out, it.lease)
	}
	return out
}

func failAll(out []pingResult, err error) []pingResult {
	for i := range out {
		out[i].err = err
	}
	return out
}

// RenewEach renews each of runs by its length from now (server time) with
// a ping of its own, all
// sent at once: one round trip, where a batch takes two (its update, then
// its read), for runs whose lease is short already. It says, for each run,
// whether it still held its slot (a run that did takes its lease), or the
// error that left it unknown: a run found taken away has neither. For runs
// the engine has not handed to the pinger yet.
func (p *Pinger) RenewEach(ctx context.Context, runs []*Run, now time.Time, lengths []time.Duration) (held []bool, errs []error) {
	held, errs = make([]bool, len(runs)), make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			it := newPingItem(r, now, lengths[i])
			reply, err := p.renew(ctx, it)
			switch {
			case err != nil:
				errs[i] = err
			case reply != nil:
				held[i] = true
				r.renewedBy(it.lease, it.length)
				r.SoleHolder = reply.Running == 1
			}
		})
	}
	wg.Wait()
	return held, errs
}
