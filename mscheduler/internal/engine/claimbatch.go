package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/claimchoice"
	"github.com/mscheduler/mscheduler/mscheduler/internal/query"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// A batch claim fills k free slots with three commands, whatever k (two,
// when each claims a task of concurrency 1: see claimedAsRead):
//  1. a query for candidate tasks, in claim order, a few more than k;
//  2. one unordered update with a statement per chosen candidate, each
//     the claim's own filter on that task and the claim's own update with
//     a run id of its own, so that every rule of a single claim holds per
//     task (free slots, one run per worker, allow-lists, groups, pauses,
//     distinct workers, due time);
//  3. one read of the chosen tasks that hold one of the batch's run ids:
//     the claims won. Statements that lost to another worker matched
//     nothing and cost nothing more.
//
// The read does not depend on the update's reply, so a reply lost on the
// way finds its claims all the same.

// claimSpread is how many times more candidates than free slots a batch
// claim reads, to choose among; with more consumers alive, as many times
// as there are, up to maxClaimSpread, so that each has a run of its own.
const (
	claimSpread    = 4
	maxClaimSpread = 8
)

// shortestLease is the shortest lease that claims of the candidates take
// before their first pings, stretched as the pass stretches them.
func shortestLease(st *claimState, cands []claimchoice.Candidate) time.Duration {
	out := claimLease
	for _, cd := range cands {
		if cd.WorkerTimeoutMS > 0 {
			out = min(out, st.runLease(stored.FromMS(cd.WorkerTimeoutMS)))
		}
	}
	return out
}

// readBackRounds is how many round trips a claim that needs a read back
// takes before its runs' first pings can land: the write, the read back
// and the ping.
const readBackRounds = 3

// readBackTooSlow says the chosen candidates need a read back (see
// claimedAsRead) that the server is too slow for: readBackRounds round
// trips, each as slow as the slowest of late, would not fit in the
// shortest of their leases.
func (c *Engine) readBackTooSlow(st *claimState, chosen []claimchoice.Candidate) bool {
	needed := slices.ContainsFunc(chosen, func(cd claimchoice.Candidate) bool { return !cd.Exact })
	return needed && !c.limiter.Affords(readBackRounds, shortestLease(st, chosen))
}

// exactOnly is the candidates that can be claimed without a read back.
func exactOnly(cands []claimchoice.Candidate) []claimchoice.Candidate {
	return slices.DeleteFunc(slices.Clone(cands), func(cd claimchoice.Candidate) bool { return !cd.Exact })
}

// claimed is a run won by a claim: the task as claimed, and the run's id.
type claimed struct {
	raw   bson.Raw
	runID string
}

// claimBatch claims up to k runs, from spares if it holds k fresh ones
// (see claimchoice.go), or else from candidates read now. It reports the
// runs won, and whether the candidates ran out (nothing else is claimable
// now).
func (c *Engine) claimBatch(ctx context.Context, st *claimState, k int) ([]claimed, bool, error) {
	now := c.clock.Now()
	chosen := st.spares.Take(k, time.Now(), c.cfg.ClaimSpareFor)
	fromSpares, tried := chosen != nil, false
	if !fromSpares {
		var err error
		if chosen, tried, err = c.chooseCandidates(ctx, st, k, now); err != nil || len(chosen) == 0 {
			return nil, err == nil && st.heldUntil.IsZero(), err
		}
	}
	for _, cd := range chosen {
		if cd.WorkerTimeoutMS > 0 {
			st.leases.observe(stored.FromMS(cd.WorkerTimeoutMS))
			c.limiter.KeepWithin(stored.FromMS(cd.WorkerTimeoutMS)) // before the claim's round trip is weighed
		}
	}
	// Weighed with the candidates' read: the writes and the tasks as
	// claimed built without a read (claimedAsRead) take this one.
	st.stretch.need, st.stretch.to = c.limiter.Stretch()
	if c.readBackTooSlow(st, chosen) {
		// The claim's write, its read back and the runs' first pings would
		// not fit in their leases as slowly as the server answers now: the
		// candidates that need no read back are claimed, or, if none, one
		// slot by a findAndModify, whose reply is the task as claimed.
		// Claimed anyway, the runs began with less lease left than a ping
		// takes, and were lost at once.
		c.log.Debug("server too slow for a claim's read back within the lease: claiming without one", "lease", shortestLease(st, chosen))
		if chosen, tried = exactOnly(chosen), false; len(chosen) == 0 {
			raw, runID, err := c.claimOne(ctx, st)
			if err != nil || raw == nil {
				return nil, err == nil, err
			}
			return []claimed{{raw: raw, runID: runID}}, false, nil
		}
	}
	// The runs start now, not when the candidates were read: on a slow
	// server that read took a round trip of their first lease.
	now = c.clock.Now()
	runIDs := make([]string, len(chosen))
	models := make([]mongo.WriteModel, len(chosen))
	exact := true
	for i, cd := range chosen {
		runIDs[i] = newRunID()
		filter := c.claimFilterOf(st, cd, now)
		if cd.Exact {
			filter = append(filter, taskstate.AsReadFence(cd.Raw)...)
		}
		exact = exact && cd.Exact
		models[i] = mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(c.claimUpdateOf(st, runIDs[i], now, cd))
	}
	// As for a single claim, a stop does not interrupt the write.
	wctx, cancel := c.claimCtx(shortestLease(st, chosen))
	defer cancel()
	sent := time.Now()
	res, werr := c.coll.BulkWrite(wctx, models, options.BulkWrite().SetOrdered(false))
	st.claimLatency = time.Since(sent)
	if werr == nil {
		c.commandTook(st.claimLatency)
	}
	if werr != nil || fromSpares && res.MatchedCount < int64(len(chosen)) {
		// Spares that missed were taken by others, or changed: the rest
		// are likely stale too. After a refusal, they may hold its task.
		st.spares.Drop()
		st.spares.Missed = st.spares.Missed || fromSpares
	}
	st.lostTasks = werr == nil && res.MatchedCount < int64(len(chosen))
	if werr == nil && exact && res.MatchedCount == int64(len(chosen)) {
		if won, ok := c.claimedAsRead(st, chosen, runIDs, now); ok {
			return won, tried, nil
		}
	}
	// The count is known only when no statement failed: after a refusal
	// its count cannot be trusted any more than its indexes (below).
	matched := int64(-1)
	if werr == nil {
		matched = res.MatchedCount
	}
	var bwe mongo.BulkWriteException
	refused := errors.As(werr, &bwe) && bwe.WriteConcernError == nil
	if refused {
		werr = nil
	}
	won, err := c.readClaims(wctx, chosen, runIDs, matched)
	if err != nil {
		for _, id := range runIDs {
			st.unconfirmed = appendBounded(st.unconfirmed, id)
		}
		return nil, false, fmt.Errorf("mscheduler: claim %d runs: %w", len(chosen), cmp.Or(werr, err))
	}
	if werr != nil {
		// The server may still apply statements after the read: the run
		// ids not found are looked for again at the next pass.
		for _, i := range notWon(runIDs, won) {
			st.unconfirmed = appendBounded(st.unconfirmed, runIDs[i])
		}
		if len(won) == 0 {
			return nil, false, fmt.Errorf("mscheduler: claim %d runs: %w", len(chosen), werr)
		}
	}
	if refused {
		// The server refused some statements on what their tasks hold. Its
		// error's indexes cannot be trusted to say which (the development
		// server reports them wrong and stops at the first), so the tasks
		// not won are claimed again one by one, where a refusal names its
		// task.
		var rest []claimchoice.Candidate
		for _, i := range notWon(runIDs, won) {
			rest = append(rest, chosen[i])
		}
		won = append(won, c.claimEachAlone(ctx, st, rest)...)
	}
	// A statement that matched nothing lost its task to another worker, or
	// to a change that made it not claimable by this one; but one fenced
	// on its task as read also misses a task that is still claimable and
	// merely changed since the read (a params edit, a run now, a pause
	// and resume): the candidates did not run out, and the pass reads
	// them again rather than leave that task to the next poll.
	if missedAsRead(chosen, runIDs, won) {
		tried, st.missedAsRead = false, true
	}
	return won, tried, nil
}

// missedAsRead says a statement fenced on its task as read won nothing.
func missedAsRead(chosen []claimchoice.Candidate, runIDs []string, won []claimed) bool {
	for _, i := range notWon(runIDs, won) {
		if chosen[i].Exact {
			return true
		}
	}
	return false
}

// chooseCandidates reads candidates and chooses k of them, keeping the
// spares. tried says every candidate read was chosen. When it leaves
// candidates of other shares to their consumers for a moment (see
// passOver), it says until when in st.heldUntil.
func (c *Engine) chooseCandidates(ctx context.Context, st *claimState, k int, now time.Time) ([]claimchoice.Candidate, bool, error) {
	sent := time.Now()
	cands, err := c.candidates(ctx, c.claimant(st, now).Due(now), candidateLimit(k, st.peers, c.cfg.ClaimSpareFor > 0))
	if err != nil {
		return nil, false, err // the spares are gone already: take found too few
	}
	// Weighed like the claim's own commands: a worker's first claim has
	// no other round trip to judge its read back by (see readBackTooSlow).
	c.commandTook(time.Since(sent))
	if len(cands) > 0 {
		c.lookAtPeers(ctx, st)
	}
	read := time.Now()
	st.passOver.See(cands, st.peers, st.rank, read, c.passOverWait(st))
	var passed func(claimchoice.Candidate) bool // fewer tasks than consumers: little to collide on, none waits
	if len(cands) >= st.peers {
		passed = func(cd claimchoice.Candidate) bool { return st.passOver.Passed(cd, read) }
	}
	chosen, spares, held := claimchoice.Choose(cands, k, st.peers, st.rank, passed)
	st.spares.Keep(spares, chosen, time.Now())
	if held {
		// From the read: a wake before the first passes would read again
		// for nothing.
		st.heldUntil = c.clock.Now().Add(max(st.passOver.UntilNext(time.Now()), time.Millisecond))
	}
	return chosen, len(chosen) == len(cands), nil
}

// candidateLimit is how many candidates a claim of k slots reads, among
// peers consumers: enough for them to choose apart, and, when it keeps
// spares, about spareClaims claims of its own share.
func candidateLimit(k, peers int, spares bool) int {
	limit := k * max(claimSpread, min(peers, maxClaimSpread))
	if spares {
		limit = max(2*limit, minSpareRead, min(spareClaims*k*peers, maxSpareRead))
	}
	return limit
}

// passOverWait is how long a consumer leaves a task of another share to
// its own consumer: twice the round trip of its last claim, so that a
// consumer with free slots has had the time to claim it, within
// [passOverMin, the poll interval].
func (c *Engine) passOverWait(st *claimState) time.Duration {
	return max(passOverMin, min(2*st.claimLatency, c.pollInterval()))
}

// passOverMin is the shortest passOverWait.
const passOverMin = 50 * time.Millisecond

// minSpareRead is the fewest candidates a claim reads when it keeps
// spares: a consumer claiming one slot at a time then reads once for
// many claims.
const minSpareRead = 16

// spareClaims is how many claims of k slots a read keeping spares holds
// of this consumer's share: only its share is kept, a peers-th of what it
// reads, so that with many consumers a read sized for one consumer served
// one claim or two, and the candidate reads (each a scan on a server
// without indexes) grew with the consumers for the same work. Eight, not
// four: while a backlog lasts, a consumer reads about half as often, and
// what it reads per task it runs (about peers candidates, a peers-th of
// them its own) stays what it was. Capped at maxSpareRead candidates per
// read.
const (
	spareClaims  = 8
	maxSpareRead = 1024
)

// claimedAsRead builds the tasks as claimed from the candidates as read,
// when every statement was fenced on its candidate's rev and matched.
func (c *Engine) claimedAsRead(st *claimState, chosen []claimchoice.Candidate, runIDs []string, now time.Time) ([]claimed, bool) {
	out := make([]claimed, len(chosen))
	for i, cd := range chosen {
		timeout := stored.FromMS(cd.WorkerTimeoutMS)
		raw, err := taskstate.ClaimedAsRead(cd.Raw, c.cfg.WorkerID, c.claimHolder(st, runIDs[i], now, timeout), now, c.claimExpiry(st, now, timeout))
		if err != nil {
			return nil, false
		}
		out[i] = claimed{raw: raw, runID: runIDs[i]}
	}
	return out, true
}

// notWon returns the indexes of the run ids that no claim of won holds.
func notWon(runIDs []string, won []claimed) []int {
	got := map[string]bool{}
	for _, cl := range won {
		got[cl.runID] = true
	}
	var out []int
	for i, id := range runIDs {
		if !got[id] {
			out = append(out, i)
		}
	}
	return out
}

// claimFilterOf is the claim filter on the candidate alone, as a statement
// of a batch claim: every write of a claim names its task, by its _id as
// read.
func (c *Engine) claimFilterOf(st *claimState, cd claimchoice.Candidate, now time.Time) bson.D {
	return c.claimant(st, now).DueByKey(cd.ID, now)
}

// claimEachAlone claims the candidates one at a time, after a batch the
// server refused part of. A task whose claim is refused is set invalid,
// naming the field; an error of another kind ends the tries.
func (c *Engine) claimEachAlone(ctx context.Context, st *claimState, cands []claimchoice.Candidate) []claimed {
	var out []claimed
	for _, cd := range cands {
		if ctx.Err() != nil {
			return out
		}
		found, err := c.claimAlone(st, cd)
		if err != nil {
			c.loopError(ctx, err)
			return out
		}
		out = append(out, found...)
	}
	return out
}

// claimAlone claims one slot of the candidate with a write of its own.
func (c *Engine) claimAlone(st *claimState, cd claimchoice.Candidate) ([]claimed, error) {
	wctx, cancel := c.writeCtx()
	defer cancel()
	now, runID := c.clock.Now(), newRunID()
	filter := c.claimFilterOf(st, cd, now)
	res, err := c.coll.UpdateOne(wctx, filter, c.claimUpdateOf(st, runID, now, cd))
	switch {
	case err != nil && isServerRefusal(err):
		c.refused(wctx, st, filter, err)
		return nil, nil
	case err != nil:
		st.unconfirmed = appendBounded(st.unconfirmed, runID)
		return nil, fmt.Errorf("mscheduler: claim %q: %w", cd.Key, err)
	case res.MatchedCount == 0:
		return nil, nil
	}
	found, err := c.readClaims(wctx, []claimchoice.Candidate{cd}, []string{runID}, 1)
	if err != nil {
		st.unconfirmed = appendBounded(st.unconfirmed, runID)
		return nil, err
	}
	return found, nil
}

// appendBounded adds a lost claim's run id to be looked for, within
// maxUnconfirmed.
func appendBounded(ids []string, id string) []string {
	if len(ids) >= maxUnconfirmed {
		return ids
	}
	return append(ids, id)
}

// claimUpdate is the update that claims one slot of a task for run runID.
// Sweeps look at the task from when its lease may lapse: the task's own
// worker timeout when the claimant read it (timeout > 0), else the
// shortest among the tasks this worker claimed last, a guess that
// tightenExpiry corrects once the claim's reply tells the task's own.
func (c *Engine) claimUpdate(st *claimState, runID string, now time.Time, timeout time.Duration) bson.D {
	return taskstate.Claim(c.cfg.WorkerID, c.claimHolder(st, runID, now, timeout), c.claimExpiry(st, now, timeout), now)
}

// claimUpdateOf is claimUpdate for a candidate read in full.
func (c *Engine) claimUpdateOf(st *claimState, runID string, now time.Time, cd claimchoice.Candidate) bson.D {
	return c.claimUpdate(st, runID, now, stored.FromMS(cd.WorkerTimeoutMS))
}

// claimHolder is the holder entry a claim at now writes for run runID of
// a task whose worker timeout is timeout (0: not read), with a longer
// lease when the server is too slow for that one (see stretchFor).
func (c *Engine) claimHolder(st *claimState, runID string, now time.Time, timeout time.Duration) stored.Holder {
	h := stored.Holder{Run: runID, Started: now, LeaseUntil: now.Add(claimLease)}
	if to := st.stretchFor(timeout); to > 0 {
		h.LeaseMS, h.LeaseUntil = to.Milliseconds(), now.Add(to)
	}
	return h
}

// claimExpiry is the next_expiry a claim at now lowers its task's to.
func (c *Engine) claimExpiry(st *claimState, now time.Time, timeout time.Duration) time.Time {
	guess := st.leases.shortest()
	if timeout > 0 {
		guess = min(guess, timeout)
	}
	return now.Add(max(guess, st.stretchFor(timeout)))
}

// candidates reads up to limit claimable tasks in claim order, in full
// but for their runs.
func (c *Engine) candidates(ctx context.Context, filter bson.D, limit int) ([]claimchoice.Candidate, error) {
	raws, err := query.FindAll(ctx, c.coll, filter, taskstate.ClaimSort, bson.D{{Key: stored.FRuns, Value: 0}}, limit)
	if err != nil {
		return nil, fmt.Errorf("mscheduler: find claimable tasks: %w", err)
	}
	out := make([]claimchoice.Candidate, 0, len(raws))
	for _, raw := range raws {
		if cd, ok := claimchoice.Of(raw); ok {
			out = append(out, cd)
		}
	}
	return out, nil
}

// readClaims reads the chosen tasks that one of runIDs claimed; matched is
// how many statements the server said matched, or -1 if it did not say.
//
// When it did, the first read also asks for status running, which every
// claim sets: storages that push down equalities only (FerretDB on
// PostgreSQL) then read the running tasks, not every task, to find the
// few chosen. A run end of another run of the task may have changed the
// status since (its failed runs exhausted, say); the count tells, and the
// read is made again without it.
func (c *Engine) readClaims(ctx context.Context, chosen []claimchoice.Candidate, runIDs []string, matched int64) ([]claimed, error) {
	if matched == 0 {
		return nil, nil
	}
	filter := c.claimsFilter(chosen, runIDs)
	if matched > 0 {
		running := append(slices.Clip(filter), bson.E{Key: stored.FStatus, Value: stored.StatusRunning}) // filter stays as it is
		won, err := c.findClaims(ctx, running, len(chosen))
		if err != nil || int64(len(won)) >= matched {
			return won, err
		}
	}
	return c.findClaims(ctx, filter, len(chosen))
}

// claimsFilter selects the chosen tasks that one of runIDs claimed.
func (c *Engine) claimsFilter(chosen []claimchoice.Candidate, runIDs []string) bson.D {
	keys := make(bson.A, len(chosen))
	for i, cd := range chosen {
		keys[i] = cd.ID
	}
	return bson.D{{Key: stored.FID, Value: taskstate.Op("$in", keys)}, {Key: stored.HolderPath(c.cfg.WorkerID, stored.HRun), Value: taskstate.Op("$in", runIDs)}}
}

func (c *Engine) findClaims(ctx context.Context, filter bson.D, limit int) ([]claimed, error) {
	raws, err := query.FindAll(ctx, c.coll, filter, nil, bson.D{{Key: stored.FRuns, Value: 0}}, limit)
	if err != nil {
		return nil, fmt.Errorf("read claimed tasks: %w", err)
	}
	out := make([]claimed, 0, len(raws))
	for _, raw := range raws {
		runID, _ := raw.Lookup(stored.FHolders, c.cfg.WorkerID, stored.HRun).StringValueOK()
		out = append(out, claimed{raw: raw, runID: runID})
	}
	return out, nil
}
