package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/claimchoice"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// claimsByKey says a claim of k slots goes by claimOneByKey: one slot,
// while work waits, of tasks that need a read back after a batch claim
// (concurrency above 1: see claimchoice.Spares.Mixed). Such a claim was a
// findAndModify of whichever task came first, a sorted query over every
// claimable task for each slot (on a server without indexes, a scan of
// the collection and a sort); from a spare, or a read that keeps spares,
// it names its task by _id, and one read serves several claims.
func (c *Engine) claimsByKey(st *claimState, k int) bool {
	if k != 1 || c.cfg.TargetedClaims || c.cfg.ClaimSpareFor <= 0 || !st.leases.seenAny() || !st.spares.Mixed {
		return false
	}
	// An idle consumer's claim of one task at a time is cheapest as one
	// findAndModify: a read first would be a second command for one claim.
	return st.backlog || st.spares.Holds(1, time.Now(), c.cfg.ClaimSpareFor)
}

// claimOneByKey claims one slot of a spare, or of a candidate read now
// (keeping the rest as spares), with one findAndModify filtered on the
// candidate's _id and the claim's own conditions: its reply is the task
// as claimed, so no read back follows, and no fence on the task as read
// is needed (the run gets the task as the claim left it). It reports the
// run won, if any, and whether the candidates ran out.
func (c *Engine) claimOneByKey(ctx context.Context, st *claimState) ([]claimed, bool, error) {
	cds := st.spares.Take(1, time.Now(), c.cfg.ClaimSpareFor)
	fromSpares, tried := cds != nil, false
	if !fromSpares {
		var err error
		if cds, tried, err = c.chooseCandidates(ctx, st, 1, c.clock.Now()); err != nil || len(cds) == 0 {
			return nil, err == nil && st.heldUntil.IsZero(), err
		}
	}
	cd := cds[0]
	if cd.WorkerTimeoutMS > 0 {
		st.leases.observe(stored.FromMS(cd.WorkerTimeoutMS))
		c.limiter.KeepWithin(stored.FromMS(cd.WorkerTimeoutMS))
	}
	st.stretch.need, st.stretch.to = c.limiter.Stretch()
	raw, runID, err := c.claimCandidate(ctx, st, cd)
	st.lostTasks = err == nil && raw == nil
	switch {
	case err != nil:
		return nil, false, err
	case raw != nil:
		return []claimed{{raw: raw, runID: runID}}, false, nil
	case fromSpares:
		// Taken by others, or changed: the other spares are likely stale
		// too, and the pass reads afresh at once.
		st.spares.Drop()
		st.spares.Missed = true
		return nil, false, nil
	default:
		return nil, tried, nil
	}
}

// claimCandidate claims one slot of the candidate with a findAndModify
// by its _id, returning the task as claimed and the run's id, or nil if
// it is no longer claimable by this consumer.
func (c *Engine) claimCandidate(ctx context.Context, st *claimState, cd claimchoice.Candidate) (bson.Raw, string, error) {
	// The run starts now, not when the candidate was read.
	now, runID := c.clock.Now(), newRunID()
	filter := c.claimFilterOf(st, cd, now)
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	// As for any claim, a stop does not interrupt the write.
	wctx, cancel := c.claimCtx(shortestLease(st, []claimchoice.Candidate{cd}))
	defer cancel()
	raw, err := c.sendClaim(wctx, st, filter, c.claimUpdateOf(st, runID, now, cd), opts)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, "", nil
	case err != nil && isServerRefusal(err):
		c.refused(wctx, st, filter, err)
		return nil, "", nil
	case err != nil:
		if found := c.claimReplyLost(wctx, st, runID); found != nil {
			return found, runID, nil
		}
		return nil, "", fmt.Errorf("mscheduler: claim %q: %w", cd.Key, err)
	}
	return raw, runID, nil
}
