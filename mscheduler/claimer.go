package mscheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// maxPoisoned bounds the keys the claim loop skips because claiming them
// fails on the server (a document edited into a shape no update can apply
// to); such a key would otherwise sort first forever and starve the rest.
const maxPoisoned = 100

// claimLoop is the consumer's owner loop for claiming. It claims while it
// has free slots and claimable tasks, then sleeps until the earliest of: a
// wake (a run ended, a change stream event), the next due time it knows of
// (a future run_at, a lease that may lapse), or the jittered poll.
func (c *Consumer[P, R]) claimLoop(ctx context.Context) {
	st := &claimState{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		c.sweepIfDue(ctx, st)
		c.claimAvailable(ctx, st)
		wait := c.untilNextWake(st)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.wakeCh:
		case <-timer.C:
		}
		// Since Go 1.23 Reset leaves no stale tick behind, so no drain.
	}
}

// claimState belongs to the claim loop goroutine alone.
type claimState struct {
	due      dueHeap  // server times when something may become claimable or expire
	poisoned []string // keys whose claim fails on the server
	pollAt   time.Time
	sweepAt  time.Time
}

func (c *Consumer[P, R]) pollInterval() time.Duration {
	if c.watching.open.Load() {
		return c.cfg.ChangeStreamPollInterval
	}
	return c.cfg.PollInterval
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func (c *Consumer[P, R]) untilNextWake(st *claimState) time.Duration {
	now := c.clock.Now()
	next := st.pollAt
	if st.sweepAt.Before(next) {
		next = st.sweepAt
	}
	if d, ok := st.due.peek(); ok && d.Before(next) {
		next = d
	}
	return max(next.Sub(now), time.Millisecond)
}

// claimAvailable claims runs while there are free slots and claimable tasks,
// at most Capacity in one pass and never past a due sweep: with short tasks
// slots free up as fast as they are claimed, and a backlog must not starve
// the sweep that rescues dead workers' runs.
func (c *Consumer[P, R]) claimAvailable(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	st.pollAt = now.Add(jitter(c.pollInterval()))
	st.due.popDue(now)
	if err := c.clock.ensure(ctx, c.coll.Database()); err != nil {
		c.loopError(ctx, err)
		return
	}
	// At least one claim per pass, so that sweeps never starve claims.
	for n := 0; n < c.cfg.Capacity && ctx.Err() == nil && (n == 0 || c.clock.Now().Before(st.sweepAt)); n++ {
		if !c.slots.TryAcquire(1) {
			return
		}
		doc, err := c.claimOne(ctx, st)
		if err != nil || doc == nil {
			c.slots.Release(1)
			if err != nil {
				c.loopError(ctx, err)
			} else {
				c.scheduleNextDue(ctx, st)
			}
			return
		}
		if !c.planGate(doc) {
			c.slots.Release(1)
			continue
		}
		c.startRun(doc)
	}
	// The pass ended on its bound with tasks perhaps left: come back at once.
	c.wake()
}

// claimOne claims one slot of the best claimable task with one
// findOneAndUpdate, or returns nil if there is none.
func (c *Consumer[P, R]) claimOne(ctx context.Context, st *claimState) (*taskDoc, error) {
	now := c.clock.Now()
	filter := claimFilter(c.cfg.WorkerID, c.cfg.Groups, st.poisoned, now)
	runID := newRunID()
	// The lease is set from the defaults of the task document, which the
	// filter cannot read; the first ping moves it to the task's own timeout.
	// Until then the run is protected by a lease of the longest timeout
	// any task may have been given, bounded to keep dead runs short.
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fStatus, Value: StatusRunning},
			{Key: holderPath(c.cfg.WorkerID), Value: holder{Run: runID, Started: now, LeaseUntil: now.Add(claimLease)}},
			{Key: fUpdatedAt, Value: now},
		}},
		{Key: "$inc", Value: bson.D{{Key: fFree, Value: -1}, {Key: fRunning, Value: 1}, {Key: fRev, Value: 1}}},
		{Key: "$min", Value: bson.D{{Key: fNextExpiry, Value: now.Add(claimLease)}}},
	}
	opts := options.FindOneAndUpdate().SetSort(claimSort).SetReturnDocument(options.After)
	// A claim the server applied must reach its run, so a stop does not
	// interrupt the command (the loop checks ctx before each claim): a claim
	// lost on the way back would hold its slot until the lease lapsed.
	wctx, cancel := c.writeCtx()
	defer cancel()
	var raw bson.Raw
	err := c.caps.findOneAndUpdate(wctx, c.coll, filter, update, opts, bson.D{{Key: fRuns, Value: 0}}).Decode(&raw)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil && isServerRefusal(err):
		c.poison(wctx, st, filter, err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("mscheduler: claim: %w", err)
	}
	return decodeClaimed(raw, c.cfg.WorkerID), nil
}

// decodeClaimed decodes a claimed task. A document that does not decode
// (edited by hand into the wrong types) still yields what the run's end
// needs, with the decoding error, so that its run fails at once and names
// the field instead of holding the slot until the lease lapses.
func decodeClaimed(raw bson.Raw, workerID string) *taskDoc {
	var doc taskDoc
	err := bson.Unmarshal(raw, &doc)
	if err == nil {
		return &doc
	}
	doc = taskDoc{Status: StatusRunning, MaxFailedRuns: 1, PingIntervalMS: ms(PingIntervalDefault), WorkerTimeoutMS: ms(WorkerTimeoutDefault)}
	doc.ID, _ = raw.Lookup(fID).StringValueOK()
	doc.Key = doc.ID
	var h holder
	_ = raw.Lookup(fHolders, workerID).Unmarshal(&h)
	doc.Holders = map[string]holder{workerID: h}
	for field, dst := range map[string]*int{fMaxFailedRuns: &doc.MaxFailedRuns, fRunning: &doc.Running, fFree: &doc.Free, fFailedRuns: &doc.FailedRuns} {
		if v, ok := raw.Lookup(field).AsInt64OK(); ok {
			*dst = int(v)
		}
	}
	doc.corrupt = fmt.Errorf("task %q: document cannot be decoded: %w", doc.Key, err)
	return &doc
}

// isServerRefusal reports an error where the server refused the command on
// its merits (as opposed to the network or a timeout), so retrying the same
// command would fail again.
func isServerRefusal(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err)
}

// poison finds the task the refused claim was aimed at and skips it from now
// on, so that the other tasks are still served.
func (c *Consumer[P, R]) poison(ctx context.Context, st *claimState, filter bson.D, cause error) {
	var doc struct {
		Key string `bson:"key"`
	}
	err := c.coll.FindOne(ctx, filter, options.FindOne().SetSort(claimSort).SetProjection(bson.D{{Key: fKey, Value: 1}})).Decode(&doc)
	if err != nil {
		c.loopError(ctx, fmt.Errorf("mscheduler: claim refused (%v), and the task could not be identified: %w", cause, err))
		return
	}
	if len(st.poisoned) < maxPoisoned {
		st.poisoned = append(st.poisoned, doc.Key)
	}
	c.log.Error("task cannot be claimed; skipping it", "key", doc.Key, "error", cause)
	c.emit(Event{Kind: EventError, Key: doc.Key, Err: fmt.Errorf("mscheduler: task %q cannot be claimed, skipped: %w", doc.Key, cause)})
}

// scheduleNextDue remembers when the earliest not-yet-due eligible task
// becomes claimable, so the loop wakes then without polling.
func (c *Consumer[P, R]) scheduleNextDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	var doc struct {
		RunAt time.Time `bson:"run_at"`
	}
	opts := options.FindOne().SetSort(bson.D{{Key: fRunAt, Value: 1}}).SetProjection(bson.D{{Key: fRunAt, Value: 1}})
	err := c.coll.FindOne(ctx, futureFilter(c.cfg.WorkerID, c.cfg.Groups, st.poisoned, now), opts).Decode(&doc)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		c.loopError(ctx, fmt.Errorf("mscheduler: find next due task: %w", err))
	default:
		st.due.add(doc.RunAt)
	}
}

// loopError reports a failed background operation. A stop in progress is
// not an error.
func (c *Consumer[P, R]) loopError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.Warn("background operation failed", "error", err)
	c.emit(Event{Kind: EventError, Err: err})
}

func newRunID() string { return uuid.NewString() }

// dueHeap is a min-heap of server times at which the claim loop should look
// again: a future run_at, or a lease that may lapse. Duplicates are harmless
// (an extra look), and its size is bounded.
type dueHeap []time.Time

const maxDue = 64

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *dueHeap) add(t time.Time) {
	if len(*h) >= maxDue {
		return
	}
	heap.Push(h, t)
}

func (h *dueHeap) peek() (time.Time, bool) {
	if len(*h) == 0 {
		return time.Time{}, false
	}
	return (*h)[0], true
}

func (h *dueHeap) popDue(now time.Time) {
	for len(*h) > 0 && !(*h)[0].After(now) {
		heap.Pop(h)
	}
}
