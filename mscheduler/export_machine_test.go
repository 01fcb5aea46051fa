package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
)

// Worker drives one consumer's machinery a step at a time, with no
// goroutine of its own: a claim, a run's end, a ping, a sweep, a check, a
// maintenance pass, each as the consumer's loops do them. The state-machine
// test uses it so that every step is its own, and a failure shrinks to a
// short sequence of them.
type Worker struct {
	c    *Consumer[map[string]any, struct{}]
	s    *engine.Stepper
	runs map[string]*lease.Run // by run id

	// behaviour is what the handler does at each attempt of Execute, and
	// lost says the run's end found its slot taken; both are written and
	// read by the test's goroutine, around Execute.
	behaviour string
	lost      map[string]bool
}

// WorkerRun is a run a Worker holds.
type WorkerRun struct {
	Key, RunID string
	Lease      time.Time
	Params     bson.RawValue // as the run's handler receives them
}

// NewWorker makes a worker of coll named id whose clock is wall and mono
// (the test moves them), with leases of the tasks it claims taken as
// written. Its run ends are written one by one; EndTogether writes
// several in one batch.
func NewWorker(ctx context.Context, coll *mongo.Collection, id string, wall func() time.Time, mono func() time.Duration, r Retention) (*Worker, error) {
	w := &Worker{lost: map[string]bool{}}
	handler := func(ctx context.Context, _ *Task[map[string]any]) (struct{}, error) {
		switch w.behaviour {
		case "error":
			return struct{}{}, errors.New("the handler failed")
		case "panic":
			panic("the handler panicked")
		case "hang":
			<-ctx.Done() // until the task's Timeout
			return struct{}{}, ctx.Err()
		}
		return struct{}{}, nil
	}
	c, err := NewConsumer(coll, handler, &ConsumerConfig{
		WorkerID: id, Clock: wall, Monotonic: mono, ClockSyncInterval: 24 * 365 * time.Hour, EndBatchMax: 1, ClaimSpareFor: NoClaimSpares,
		Retention: r, Logger: machineLog(), TimeoutGrace: time.Second,
		OnEvent: func(e Event) {
			if e.Kind == EventLeaseLost {
				w.lost[e.RunID] = true
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s, err := engine.NewStepper(ctx, c.eng)
	if err != nil {
		return nil, err
	}
	w.c, w.s, w.runs = c, s, map[string]*lease.Run{}
	return w, nil
}

// ShareClock makes w and the producer p read the server's time as like
// does, from one measurement: the test's model then has one time.
func ShareClock[P any](like *Worker, p *Producer[P], ws ...*Worker) {
	for _, w := range ws {
		w.s.Clock().Share(like.s.Clock())
	}
	if p != nil {
		p.clock.Share(like.s.Clock())
	}
}

// Now is the worker's estimate of the server's time.
func (w *Worker) Now() time.Time { return w.s.Clock().Now() }

// Claim claims one slot of the best claimable task, as a consumer with one
// free slot does (a findAndModify), and admits it as the consumer would:
// a task that cannot run as stored is set invalid, and a plan's gate may
// give the slot back. It returns the run started, if one was.
func (w *Worker) Claim(ctx context.Context) (*WorkerRun, error) {
	r, err := w.s.Claim(ctx)
	if err != nil || r == nil {
		return nil, err
	}
	return w.hold(r), nil
}

// ClaimByKey claims one slot by a candidate's _id (the candidate query,
// then a findAndModify naming the task).
func (w *Worker) ClaimByKey(ctx context.Context) (*WorkerRun, error) {
	r, err := w.s.ClaimByKey(ctx)
	if err != nil || r == nil {
		return nil, err
	}
	return w.hold(r), nil
}

// ClaimBatch claims up to k slots with a batch claim (the candidate query,
// one update of a statement each, and the read back when needed).
func (w *Worker) ClaimBatch(ctx context.Context, k int) ([]WorkerRun, error) {
	rs, err := w.s.ClaimBatch(ctx, k)
	var out []WorkerRun
	for _, r := range rs {
		out = append(out, *w.hold(r))
	}
	return out, err
}

func (w *Worker) hold(r *lease.Run) *WorkerRun {
	w.runs[r.RunID] = r
	return &WorkerRun{Key: r.Key, RunID: r.RunID, Lease: r.Lease(), Params: r.Doc.Params}
}

// Runs are the runs the worker holds, as it knows them.
func (w *Worker) Runs() []WorkerRun {
	out := make([]WorkerRun, 0, len(w.runs))
	for _, r := range w.runs {
		out = append(out, WorkerRun{Key: r.Key, RunID: r.RunID, Lease: r.Lease()})
	}
	return out
}

// End writes the end of a run of the worker with outcome, as a run's
// goroutine does. It returns ErrLeaseLost when the run no longer held its
// slot.
func (w *Worker) End(ctx context.Context, runID string, outcome Outcome) error {
	r, ok := w.runs[runID]
	if !ok {
		return fmt.Errorf("no run %s", runID)
	}
	delete(w.runs, runID)
	return w.s.End(ctx, r, outcome)
}

// EndTogether writes the ends of several runs of the worker in one batch,
// as the run-end batcher does; it returns the error of each run's end.
func (w *Worker) EndTogether(ctx context.Context, runIDs []string, outcomes []Outcome) []error {
	rs := make([]*lease.Run, len(runIDs))
	for i, id := range runIDs {
		rs[i] = w.runs[id]
		delete(w.runs, id)
	}
	return w.s.EndTogether(ctx, rs, outcomes, func() int { return len(w.runs) })
}

// Execute runs the run's handler as the consumer does, with its local
// retries and the task's Timeout, doing at each attempt what behaviour
// says ("succeed", "error", "panic" or "hang" until its deadline), and
// writes the run's end. It returns ErrLeaseLost when the end found the
// run's slot taken.
func (w *Worker) Execute(ctx context.Context, runID, behaviour string) error {
	r, ok := w.runs[runID]
	if !ok {
		return fmt.Errorf("no run %s", runID)
	}
	delete(w.runs, runID)
	w.behaviour = behaviour
	if err := w.s.Execute(ctx, r); err != nil {
		return err
	}
	if w.lost[runID] {
		return ErrLeaseLost
	}
	return nil
}

// Ping renews a run's lease, as the pinger does; it says whether the run
// still held its slot.
func (w *Worker) Ping(ctx context.Context, runID string) (bool, error) {
	r, ok := w.runs[runID]
	if !ok {
		return false, fmt.Errorf("no run %s", runID)
	}
	held, err := w.s.Ping(ctx, r)
	if err == nil && !held {
		delete(w.runs, runID)
	}
	return held, err
}

// PingTogether renews the leases of runs in one batch, as the pinger does
// when several are due; it says, for each, whether it still held its
// slot.
func (w *Worker) PingTogether(ctx context.Context, runIDs []string) ([]bool, error) {
	rs := make([]*lease.Run, len(runIDs))
	for i, id := range runIDs {
		r, ok := w.runs[id]
		if !ok {
			return nil, fmt.Errorf("no run %s", id)
		}
		rs[i] = r
	}
	held, err := w.s.PingTogether(ctx, rs)
	for i, h := range held {
		if !h && err == nil {
			delete(w.runs, runIDs[i])
		}
	}
	return held, err
}

// Die forgets every run of the worker, as a worker killed does: their
// leases lapse and another worker's sweep expires them.
func (w *Worker) Die() { clear(w.runs) }

// Sweep expires the runs whose lease lapsed, as the upkeep loop's sweep
// does.
func (w *Worker) Sweep(ctx context.Context) error {
	return w.s.Sweep(ctx)
}

// Check runs the periodic check of unclaimable documents once.
func (w *Worker) Check(ctx context.Context) error {
	return w.s.Check(ctx)
}

// Maintain runs one maintenance pass: retention deletes and the history
// records left unwritten.
func (w *Worker) Maintain(ctx context.Context) {
	w.s.Maintain(ctx)
}

// machineLog discards a worker's logs unless MSCHEDULER_TEST_LOG is set.
func machineLog() *slog.Logger {
	if os.Getenv("MSCHEDULER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
