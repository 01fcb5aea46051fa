package mscheduler

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

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// A batch of run ends writes the ends of several runs of this worker in
// one unordered update, each statement the case its run end would try
// first alone, fenced on its run. When every statement matched, that is
// all; otherwise one read of the tasks tells each run end what happened
// to it:
//   - the run still holds its slot: the task moved to another case since
//     it was read, and the run end is written alone from the state read;
//   - otherwise the statement applied, or another worker took the slot (a
//     sweep that expired the run): the task's record of the run tells
//     which (see goneOrApplied).
//
// The batcher's loop is the only writer of batches. It sends a batch as
// soon as the previous one is written, taking every run end that queued
// meanwhile; while other runs of this consumer are going, it waits up to
// a window for more of them to end.

// errWriteAlone tells a run end to write itself alone.
var errWriteAlone = errors.New("run end left to be written alone")

type endRequest struct {
	end   *runEnd
	reply chan error // buffered 1; the loop answers every request it takes
}

type endBatcher struct {
	coll         *mongo.Collection
	workerID     string
	max          int
	window       time.Duration
	writeTimeout time.Duration
	going        func() int // the runs this consumer holds, read by the loop

	queue chan *endRequest // unbuffered: a request sent is a request taken
	done  chan struct{}    // closed when the loop has returned

	// carried are statements of others (the historian's) to send with
	// the next batch: added by them, taken by the loop or by them again.
	carriedMu sync.Mutex
	carried   []mongo.WriteModel
}

// carry adds statements to send with the next batch, and says whether
// none were waiting before. They need no answer: whoever carries them
// takes back what is left (takeCarried) if no batch went in time.
func (b *endBatcher) carry(models []mongo.WriteModel) (first bool) {
	b.carriedMu.Lock()
	defer b.carriedMu.Unlock()
	first = len(b.carried) == 0
	b.carried = append(b.carried, models...)
	return first
}

// takeCarried takes the statements carried and not sent yet.
func (b *endBatcher) takeCarried() []mongo.WriteModel { return b.takeCarriedUpTo(-1) }

// takeRiders takes the carried statements that ride with a batch of
// ends run ends: as many as fill it up to its bound (EndBatchMax, or
// maxPullStatements if larger), no more.
func (b *endBatcher) takeRiders(ends int) []mongo.WriteModel {
	return b.takeCarriedUpTo(max(b.max, maxPullStatements) - ends)
}

// takeCarriedUpTo takes at most n of the statements carried (all of them
// if n is negative); the rest wait for the next batch, or for whoever
// carried them.
func (b *endBatcher) takeCarriedUpTo(n int) []mongo.WriteModel {
	b.carriedMu.Lock()
	defer b.carriedMu.Unlock()
	if n < 0 || n > len(b.carried) {
		n = len(b.carried)
	}
	out := slices.Clone(b.carried[:n])
	b.carried = b.carried[n:]
	if len(b.carried) == 0 {
		b.carried = nil
	}
	return out
}

func newEndBatcher(coll *mongo.Collection, workerID string, maxBatch int, window, writeTimeout time.Duration, going func() int) *endBatcher {
	return &endBatcher{coll: coll, workerID: workerID, max: maxBatch, window: window, writeTimeout: writeTimeout, going: going,
		queue: make(chan *endRequest), done: make(chan struct{})}
}

// write writes e within a batch. It returns nil once applied, errRunGone
// if the run lost its slot, errWriteAlone when e must be written alone,
// or the error of the batch's command.
func (b *endBatcher) write(e *runEnd) error {
	req := &endRequest{end: e, reply: make(chan error, 1)}
	select {
	case b.queue <- req:
		return <-req.reply // the loop bounds its command by writeTimeout
	case <-b.done:
		return errWriteAlone
	}
}

// loop writes batches until ctx is done; by then no run end is waiting
// (Stop ends it after the runs).
func (b *endBatcher) loop(ctx context.Context) {
	defer close(b.done)
	for {
		select {
		case <-ctx.Done():
			return
		case first := <-b.queue:
			b.flush(ctx, b.collect(ctx, first))
		}
	}
}

// collect gathers a batch: every request already waiting and, while other
// runs may end soon, those that come within the window.
func (b *endBatcher) collect(ctx context.Context, first *endRequest) []*endRequest {
	batch := []*endRequest{first}
	var timeout <-chan time.Time
	for len(batch) < b.max {
		select {
		case req := <-b.queue:
			batch = append(batch, req)
			continue
		default:
		}
		if timeout == nil {
			if b.window <= 0 || b.going() <= len(batch) {
				return batch
			}
			timer := time.NewTimer(b.window)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case req := <-b.queue:
			batch = append(batch, req)
		case <-timeout:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// flush writes a batch and answers each of its requests.
func (b *endBatcher) flush(ctx context.Context, batch []*endRequest) {
	answered := make([]bool, len(batch))
	answer := func(i int, err error) {
		if !answered[i] {
			answered[i] = true
			batch[i].reply <- err
		}
	}
	defer func() {
		for i := range batch {
			answer(i, errWriteAlone)
		}
	}()
	if len(batch) == 1 {
		return // alone, it takes the plain path: no read after a miss
	}
	models := make([]mongo.WriteModel, 0, len(batch))
	index := make([]int, 0, len(batch)) // batch index of each statement
	for i, req := range batch {
		if c, ok := req.end.Likely(); ok {
			models = append(models, mongo.NewUpdateOneModel().SetFilter(req.end.Filter(c)).SetUpdate(req.end.Update(c)))
			index = append(index, i)
		}
	}
	if len(models) == 0 {
		return
	}
	// Carried statements go last, so that the indexes of the run ends'
	// are their own; they match too unless their task was deleted, and
	// then the read sorts the run ends out as after any miss. They fill
	// the batch up to its bound, no further: see maxPullStatements.
	models = append(models, b.takeRiders(len(models))...)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.writeTimeout)
	defer cancel()
	res, err := b.coll.BulkWrite(wctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	switch {
	case err == nil && res.MatchedCount == int64(len(models)):
		for _, i := range index {
			answer(i, nil)
		}
		return
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil:
		// Statements refused on what their task holds. The read tells
		// which were applied, whatever the error's indexes say (the
		// development server reports them wrong, and stops at the first).
	case err != nil && unwritable(err):
		return // a refusal of the whole command: each run end meets it alone
	case err != nil:
		err = fmt.Errorf("mscheduler: end %d runs: %w", len(models), err)
		for _, i := range index {
			answer(i, err)
		}
		return
	}
	b.sortOut(wctx, batch, index, answer)
}

// sortOut reads the tasks of a batch that did not all match and answers
// each request with what happened to its run.
func (b *endBatcher) sortOut(ctx context.Context, batch []*endRequest, index []int, answer func(int, error)) {
	keys := make(bson.A, 0, len(index))
	proj := append(taskstate.RefreshProjection(), bson.E{Key: holderPath(b.workerID, hRun), Value: 1})
	for _, i := range index {
		e := batch[i].end
		keys = append(keys, e.ID)
	}
	tasks, err := readByKey(ctx, b.coll, keys, proj)
	if err != nil {
		for _, i := range index {
			answer(i, err)
		}
		return
	}
	for _, i := range index {
		e := batch[i].end
		raw := tasks[e.key]
		run, _ := raw.Lookup(fHolders, b.workerID, hRun).StringValueOK()
		switch {
		case raw != nil && run == e.Record.RunID:
			// Still held: alone, it starts from the state just read (and
			// meets there the refusal of a statement the server refused).
			if prob := e.Refresh(raw); prob != nil {
				answer(i, &unreadableError{key: e.key, prob: prob})
			} else {
				answer(i, errWriteAlone)
			}
		default:
			// Applied, or taken by another worker: the task's record of
			// the run tells (a sweep's expiry marks the run too, maybe in
			// the very same millisecond).
			answer(i, e.goneOrApplied(ctx, b.coll))
		}
	}
}

// readByKey reads the tasks of keys with projection proj, by key.
func readByKey(ctx context.Context, coll *mongo.Collection, keys bson.A, proj bson.D) (map[string]bson.Raw, error) {
	raws, err := findAll(ctx, coll, bson.D{{Key: fID, Value: op("$in", keys)}}, nil, proj, len(keys))
	if err != nil {
		return nil, fmt.Errorf("mscheduler: read tasks: %w", err)
	}
	out := make(map[string]bson.Raw, len(raws))
	for _, raw := range raws {
		if key, ok := raw.Lookup(fID).StringValueOK(); ok {
			out[key] = raw
		}
	}
	return out, nil
}

// findAll reads at most limit documents in one reply, with no getMore: a
// batch one larger than the limit (the development server leaves a cursor
// open after a reply that is exactly full).
func findAll(ctx context.Context, coll *mongo.Collection, filter, sort, proj bson.D, limit int) ([]bson.Raw, error) {
	opts := options.Find().SetProjection(proj).SetLimit(int64(limit)).SetBatchSize(int32(limit + 1))
	if sort != nil {
		opts.SetSort(sort)
	}
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, err
	}
	return raws, nil
}
