package engine

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/lease"
	"github.com/mscheduler/mscheduler/mscheduler/internal/runend"
	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Stepper drives an engine a step at a time, with no goroutine of its
// own: a claim, a run's end, a ping, a sweep, a check, a maintenance pass,
// each as the engine's loops do them. The public package's state-machine
// test drives workers with it, so that every step is its own and a
// failure shrinks to a short sequence of them. An engine driven by a
// Stepper is never started.
type Stepper struct {
	e  *Engine
	st *claimState
	sw *sweepState
	up *upkeepState
}

// NewStepper measures the server clock of e and returns its stepper. The
// engine claims as one consumer among one: its batch claims take
// candidates in claim order, not from a random place, so that a sequence
// replays.
func NewStepper(ctx context.Context, e *Engine) (*Stepper, error) {
	e.endCtx, e.workCtx = context.Background(), context.Background()
	if err := e.clock.Ensure(ctx, e.coll.Database()); err != nil {
		return nil, err
	}
	return &Stepper{e: e, st: &claimState{peers: 1}, sw: &sweepState{}, up: &upkeepState{}}, nil
}

// Clock is the engine's estimate of the server's clock.
func (s *Stepper) Clock() *serverclock.Clock { return s.e.clock }

// Claim claims one slot of the best claimable task, as a consumer with one
// free slot does (a findAndModify), and admits it as the claim loop does:
// a task that cannot run as stored is set invalid, and a plan's gate may
// give the slot back. It returns the run started, if one was.
func (s *Stepper) Claim(ctx context.Context) (*lease.Run, error) {
	raw, runID, err := s.e.claimOne(ctx, s.st)
	if err != nil || raw == nil {
		return nil, err
	}
	return s.admit(raw, runID), nil
}

// ClaimBatch claims up to k slots with a batch claim (the candidate query,
// one update of a statement each, and the read back when needed).
func (s *Stepper) ClaimBatch(ctx context.Context, k int) ([]*lease.Run, error) {
	s.st.backlog = true
	won, _, err := s.e.claimBatch(ctx, s.st, k)
	var out []*lease.Run
	for _, cl := range won {
		if r := s.admit(cl.raw, cl.runID); r != nil {
			out = append(out, r)
		}
	}
	return out, err
}

// ClaimByKey claims one slot as a consumer with work waiting does for tasks
// of concurrency above 1: a candidate read keeping spares, then a
// findAndModify of the chosen candidate by its _id (see claimOneByKey).
func (s *Stepper) ClaimByKey(ctx context.Context) (*lease.Run, error) {
	s.st.backlog = true
	s.st.spares.Drop()
	won, _, err := s.e.claimOneByKey(ctx, s.st)
	if err != nil || len(won) == 0 {
		return nil, err
	}
	return s.admit(won[0].raw, won[0].runID), nil
}

func (s *Stepper) admit(raw bson.Raw, runID string) *lease.Run {
	doc, _, _, prob := s.e.decodeClaimed(raw)
	if prob != nil {
		s.e.quarantineClaimed(raw, runID, prob)
		return nil
	}
	s.st.leases.observe(stored.FromMS(doc.WorkerTimeoutMS))
	if !s.e.planGate(doc) {
		return nil
	}
	return s.e.leasedRun(doc)
}

// End writes the end of run r with outcome, as a run's goroutine does. It
// returns ErrLeaseLost when the run no longer held its slot.
func (s *Stepper) End(ctx context.Context, r *lease.Run, outcome stored.Outcome) error {
	end := s.endOf(r, outcome)
	err := end.Write(ctx, s.e.coll)
	switch {
	case errors.Is(err, runend.ErrGone):
		return ErrLeaseLost
	case runend.Unwritable(err):
		s.e.endUnwritable(r, end, err)
		return nil
	}
	return err
}

// EndTogether writes the ends of several runs in one batch, as the
// run-end batcher does; it returns the error of each run's end.
func (s *Stepper) EndTogether(ctx context.Context, rs []*lease.Run, outcomes []stored.Outcome, held func() int) []error {
	b := runend.NewBatcher(s.e.coll, s.e.cfg.WorkerID, 64, 0, held)
	ends := make([]*runend.End, len(rs))
	for i, r := range rs {
		ends[i] = s.endOf(r, outcomes[i])
	}
	out := b.WriteTogether(ctx, ends)
	for i, err := range out {
		if errors.Is(err, runend.ErrGone) {
			out[i] = ErrLeaseLost
		}
	}
	return out
}

func (s *Stepper) endOf(r *lease.Run, outcome stored.Outcome) *runend.End {
	end := s.e.newRunEnd(r, 1)
	end.Record.Outcome = outcome
	if outcome != stored.OutcomeSucceeded {
		end.Record.Error = "ended " + string(outcome) + " by the test"
	}
	return end
}

// Execute runs the handler of run r as the engine does, with its local
// retries and the task's Timeout, and writes the run's end.
func (s *Stepper) Execute(ctx context.Context, r *lease.Run) error {
	h := r.Doc.Holders[s.e.cfg.WorkerID]
	run := &Run{ID: r.RunID, WorkerID: s.e.cfg.WorkerID, StartedAt: h.Started}
	call, err := s.e.cfg.Prepare(r.Doc, run)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.Cancel = cancel
	s.e.execute(rctx, r, &job{run: run, call: call})
	return nil
}

// Ping renews the lease of run r, as the pinger does; it says whether the
// run still held its slot.
func (s *Stepper) Ping(ctx context.Context, r *lease.Run) (bool, error) {
	now := s.e.clock.Now()
	reply, err := s.e.pinger.Renew(ctx, r, now, r.WorkerTimeout, 1)
	if err != nil || reply == nil {
		return false, err
	}
	r.SetLease(now.Add(r.WorkerTimeout))
	r.SoleHolder = reply.Running == 1
	return true, nil
}

// PingTogether renews the leases of rs in one batch, as the pinger does
// when several are due; it says, for each, whether it still held its slot.
func (s *Stepper) PingTogether(ctx context.Context, rs []*lease.Run) ([]bool, error) {
	lengths := make([]time.Duration, len(rs))
	for i, r := range rs {
		lengths[i] = r.WorkerTimeout
	}
	held, errs := s.e.pinger.RenewTogether(ctx, rs, s.e.clock.Now(), lengths)
	return held, errors.Join(errs...)
}

// Sweep expires the runs whose lease lapsed, as the sweep loop's sweep
// does.
func (s *Stepper) Sweep(ctx context.Context) error {
	now := s.e.clock.Now()
	_, _, err := s.e.upkeep.Sweep(ctx, &s.sw.skips, now, now)
	return err
}

// Check runs the periodic check of unclaimable documents once.
func (s *Stepper) Check(ctx context.Context) error {
	_, err := s.e.upkeep.Check(ctx, s.e.clock.Now())
	return err
}

// Maintain runs one maintenance pass: retention deletes and the history
// records left unwritten.
func (s *Stepper) Maintain(ctx context.Context) {
	s.e.upkeep.Maintain(ctx, s.e.clock.Now(), &s.up.ttl)
}
