package runend

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

// ErrWriteAlone tells a run end to write itself alone.
var ErrWriteAlone = errors.New("run end left to be written alone")

type request struct {
	end   *End
	reply chan error // buffered 1; the loop answers every request it takes
}

type Batcher struct {
	coll     *mongo.Collection
	workerID string
	max      int
	window   time.Duration
	going    func() int // the runs this consumer holds, read by the loop

	queue chan *request // unbuffered: a request sent is a request taken
	done  chan struct{} // closed when the loop has returned

	// carried are statements of others (the historian's) to send with
	// the next batch: added by them, taken by the loop or by them again.
	carriedMu sync.Mutex
	carried   []mongo.WriteModel
}

// Carry adds statements to send with the next batch, and says whether
// none were waiting before. They need no answer: whoever carries them
// takes back what is left (takeCarried) if no batch went in time.
func (b *Batcher) Carry(models []mongo.WriteModel) (first bool) {
	b.carriedMu.Lock()
	defer b.carriedMu.Unlock()
	first = len(b.carried) == 0
	b.carried = append(b.carried, models...)
	return first
}

// Carried is how many statements wait to ride with the next batch.
func (b *Batcher) Carried() int {
	b.carriedMu.Lock()
	defer b.carriedMu.Unlock()
	return len(b.carried)
}

// TakeCarried takes the statements carried and not sent yet.
func (b *Batcher) TakeCarried() []mongo.WriteModel { return b.takeCarriedUpTo(-1) }

// TakeRiders takes the carried statements that ride with a batch of
// ends run ends: as many as fill it up to its bound (EndBatchMax, or
// query.MaxStatements if larger), no more.
func (b *Batcher) TakeRiders(ends int) []mongo.WriteModel {
	return b.takeCarriedUpTo(max(b.max, query.MaxStatements) - ends)
}

// takeCarriedUpTo takes at most n of the statements carried (all of them
// if n is negative); the rest wait for the next batch, or for whoever
// carried them.
func (b *Batcher) takeCarriedUpTo(n int) []mongo.WriteModel {
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

// NewBatcher makes the batcher of a worker's run ends: at most maxBatch a
// command; while going (the runs the worker holds) says more may end, a
// batch waits up to window for them. A batch's commands are waited for
// while any of its runs holds its lease (see End.Held), however slow the
// server. Its Loop must run for Write to be answered.
func NewBatcher(coll *mongo.Collection, workerID string, maxBatch int, window time.Duration, going func() int) *Batcher {
	return &Batcher{coll: coll, workerID: workerID, max: maxBatch, window: window, going: going,
		queue: make(chan *request), done: make(chan struct{})}
}

// Write writes e within a batch. It returns nil once applied, ErrGone
// if the run lost its slot, ErrWriteAlone when e must be written alone,
// or the error of the batch's command.
//
// An end the loop has not taken by its SendBy is left to be written
// alone: the loop takes no end while it writes a batch, and a batch of
// many statements on a slow server (or one it had to sort out, a read
// more) kept ends waiting behind it until their leases lapsed, though
// their handlers had ended in time.
func (b *Batcher) Write(e *End) error {
	req := &request{end: e, reply: make(chan error, 1)}
	var late <-chan time.Time
	if !e.SendBy.IsZero() {
		wait := time.Until(e.SendBy)
		if wait <= 0 {
			select {
			case b.queue <- req: // the loop waits for ends: no wait here
				return <-req.reply
			default:
				return ErrWriteAlone
			}
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		late = timer.C
	}
	select {
	case b.queue <- req:
		return <-req.reply // the loop waits no longer than the runs' leases
	case <-late:
		return ErrWriteAlone
	case <-b.done:
		return ErrWriteAlone
	}
}

// WriteTogether writes ends in one batch at once, without the loop, and
// returns each end's outcome as Write does; an end the batch leaves to be
// written alone is written alone.
func (b *Batcher) WriteTogether(ctx context.Context, ends []*End) []error {
	batch := make([]*request, len(ends))
	for i, e := range ends {
		batch[i] = &request{end: e, reply: make(chan error, 1)}
	}
	b.flush(ctx, batch)
	out := make([]error, len(batch))
	for i, req := range batch {
		out[i] = <-req.reply
		if errors.Is(out[i], ErrWriteAlone) {
			out[i] = req.end.Write(ctx, b.coll)
		}
	}
	return out
}

// Loop writes batches until ctx is done; by then no run end is waiting
// (Stop ends it after the runs).
func (b *Batcher) Loop(ctx context.Context) {
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
func (b *Batcher) collect(ctx context.Context, first *request) []*request {
	batch := []*request{first}
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
func (b *Batcher) flush(ctx context.Context, batch []*request) {
	answered := make([]bool, len(batch))
	answer := func(i int, err error) {
		if !answered[i] {
			answered[i] = true
			batch[i].reply <- err
		}
	}
	defer func() {
		for i := range batch {
			answer(i, ErrWriteAlone)
		}
	}()
	if len(batch) == 1 && b.Carried() == 0 {
		// Alone, it takes the plain path: no read after a miss. With
		// statements carried, it takes them along in one command.
		return
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
	// the batch up to its bound, no further: see query.MaxStatements.
	models = append(models, b.TakeRiders(len(models))...)
	wctx, cancel := retry.UntilAllDone(ctx, heldOf(batch, index), errLeasesGone)
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
	case err != nil && Unwritable(err):
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

var errLeasesGone = errors.New("mscheduler: every run of the batch lost its lease")

// heldOf is the held contexts of the batch's statements; a run end with
// none holds the batch for as long as it takes.
func heldOf(batch []*request, index []int) []context.Context {
	out := make([]context.Context, 0, len(index))
	for _, i := range index {
		if h := batch[i].end.Held; h != nil {
			out = append(out, h)
		} else {
			out = append(out, context.Background())
		}
	}
	return out
}

// sortOut reads the tasks of a batch that did not all match and answers
// each request with what happened to its run.
func (b *Batcher) sortOut(ctx context.Context, batch []*request, index []int, answer func(int, error)) {
	keys := make(bson.A, 0, len(index))
	proj := append(taskstate.RefreshProjection(), bson.E{Key: stored.HolderPath(b.workerID, stored.HRun), Value: 1})
	for _, i := range index {
		e := batch[i].end
		keys = append(keys, e.ID)
	}
	tasks, err := query.ByID(ctx, b.coll, keys, proj)
	if err != nil {
		for _, i := range index {
			answer(i, err)
		}
		return
	}
	for _, i := range index {
		e := batch[i].end
		raw := tasks[e.Key]
		run, _ := raw.Lookup(stored.FHolders, b.workerID, stored.HRun).StringValueOK()
		switch {
		case raw != nil && run == e.Record.RunID:
			// Still held: alone, it starts from the state just read (and
			// meets there the refusal of a statement the server refused).
			if prob := e.Refresh(raw); prob != nil {
				answer(i, &Unreadable{Key: e.Key, Problem: prob})
			} else {
				answer(i, ErrWriteAlone)
			}
		default:
			// Applied, or taken by another worker: the task's record of
			// the run tells (a sweep's expiry marks the run too, maybe in
			// the very same millisecond).
			answer(i, e.GoneOrApplied(ctx, b.coll))
		}
	}
}
