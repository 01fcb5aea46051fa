package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// takeIn asks for runs. Executor and groups are given only when the
// gateway has no tokens; session is a fresh id per executor process start.
type takeIn struct {
	Executor string   `json:"executor,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	Session  string   `json:"session,omitempty"`
	Max      int      `json:"max,omitempty"`
	WaitMS   int64    `json:"wait_ms,omitempty"`
}

// runOut is a run handed to an executor.
type runOut struct {
	RunID        string            `json:"run_id"`
	Key          string            `json:"key"`
	Attempt      int               `json:"attempt"`
	Delivery     int               `json:"delivery"`
	Params       json.RawMessage   `json:"params"`
	Headers      map[string]string `json:"headers,omitempty"`
	LeaseMS      int64             `json:"lease_ms"`
	RenewEveryMS int64             `json:"renew_every_ms"`
	PlannedAt    *time.Time        `json:"planned_at,omitempty"` // a planned occurrence's time
}

func newRunOut(r *parked) runOut {
	r.mu.Lock()
	delivery := r.deliveries
	r.mu.Unlock()
	out := runOut{RunID: r.runID, Key: r.key, Attempt: r.attempt, Delivery: delivery, Params: toJSON(r.params),
		Headers: r.headers, LeaseMS: millis(r.lease), RenewEveryMS: millis(r.renewEvery)}
	if !r.planned.IsZero() {
		planned := r.planned.UTC()
		out.PlannedAt = &planned
	}
	return out
}

func (g *Gateway) takeRuns(w http.ResponseWriter, r *http.Request, c caller) error {
	var in takeIn
	if err := decode(r, &in); err != nil {
		return err
	}
	ex, aerr := c.executorOf(in.Executor, in.Groups)
	if aerr != nil {
		return aerr
	}
	n := in.Max
	if n == 0 {
		n = 1
	}
	if n < 1 || n > g.cfg.MaxTake {
		return &apiError{http.StatusBadRequest, "max", fmt.Sprintf("must be from 1 to %d (MaxTake), got %d", g.cfg.MaxTake, in.Max), nil}
	}
	if in.WaitMS < 0 || in.WaitMS > millis(g.cfg.MaxWait) { // compared before it is a Duration, which could wrap
		return &apiError{http.StatusBadRequest, "wait_ms", fmt.Sprintf("must be from 0 to %d (MaxWait), got %d", millis(g.cfg.MaxWait), in.WaitMS), nil}
	}
	wait := ms(in.WaitMS)
	p, aerr := g.poolOf(r.Context(), r.PathValue("collection"), ex)
	if aerr != nil {
		return aerr
	}
	g.seen(ex, p.coll, r.RemoteAddr, n)
	runs, aerr := g.returning(p, ex, in.Session, n)
	if aerr != nil {
		return aerr
	}
	if len(runs) == 0 {
		// A take that does not wait holds no waiting place: executors
		// polling with wait_ms 0 would otherwise take the places of those
		// that wait, and be refused when they are all held.
		waits := wait > 0
		if waits {
			if aerr := g.enterWait(ex.ID); aerr != nil {
				return aerr
			}
		}
		runs = p.take(r.Context(), ex, in.Session, n, wait)
		if waits {
			g.leaveWait(ex.ID)
		}
	}
	if ctx := r.Context(); ctx.Err() != nil && !errors.Is(context.Cause(ctx), errShutdown) { // the taker went away: its runs go back, unrun
		for _, run := range runs {
			_ = run.finish(runResult{err: fmt.Errorf("its taker went away before the answer: %w", mscheduler.ErrRelease)})
		}
		return nil
	}
	out := make([]runOut, len(runs))
	for i, run := range runs {
		out[i] = newRunOut(run)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
	return nil
}

// enterWait takes a waiting place for an executor's take, or says why
// there is none: every place is held, or the executor holds its share.
func (g *Gateway) enterWait(executor string) *apiError {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.waitingOf[executor] >= g.cfg.MaxWaitingPerExecutor:
		return &apiError{http.StatusTooManyRequests, "", fmt.Sprintf("executor %q has %d takes waiting already (MaxWaitingPerExecutor): take again when one answers", executor, g.cfg.MaxWaitingPerExecutor), nil}
	case g.waiting >= g.cfg.MaxWaiting:
		return &apiError{http.StatusTooManyRequests, "", fmt.Sprintf("%d takes wait already (MaxWaiting): take again later", g.cfg.MaxWaiting), nil}
	}
	g.waiting++
	g.waitingOf[executor]++
	return nil
}

func (g *Gateway) leaveWait(executor string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
	if g.waitingOf[executor]--; g.waitingOf[executor] == 0 {
		delete(g.waitingOf, executor)
	}
}

// renewIn renews runs of one executor.
type renewIn struct {
	Executor string   `json:"executor,omitempty"`
	RunIDs   []string `json:"run_ids"`
}

// lostRun is a run a renewal did not find held, and why.
type lostRun struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

func (g *Gateway) renewRuns(w http.ResponseWriter, r *http.Request, c caller) error {
	var in renewIn
	if err := decode(r, &in); err != nil {
		return err
	}
	ex, aerr := c.executorOf(in.Executor, nil)
	if aerr != nil {
		return aerr
	}
	if len(in.RunIDs) == 0 {
		return &apiError{http.StatusBadRequest, "run_ids", "name at least one run", nil}
	}
	coll := r.PathValue("collection")
	var held []*parked
	lost := []lostRun{}
	for _, id := range in.RunIDs {
		run, aerr := g.run(coll, id, ex.ID)
		if aerr != nil { // gone, or another executor's now (a retry keeps the run id): the others are renewed all the same
			lost = append(lost, lostRun{id, aerr.message})
			continue
		}
		held = append(held, run)
	}
	if len(held) > 0 {
		g.seen(ex, coll, r.RemoteAddr, 0)
	}
	renewed := []string{}
	for _, run := range held {
		if aerr := run.renew(); aerr != nil {
			lost = append(lost, lostRun{run.runID, aerr.message})
			continue
		}
		renewed = append(renewed, run.runID)
	}
	status := http.StatusOK
	if len(lost) > 0 {
		status = http.StatusConflict
	}
	writeJSON(w, status, map[string]any{"renewed": renewed, "lost": lost})
	return nil
}

// endIn ends a run: complete with a result, fail with an error, or
// release.
type endIn struct {
	Executor string          `json:"executor,omitempty"`
	RunID    string          `json:"run_id"`
	Attempt  int             `json:"attempt,omitempty"` // the attempt handed out: a later one of the same run is not ended by it
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	Retry    *bool           `json:"retry,omitempty"` // fail only; defaults to true
}

func (g *Gateway) complete(w http.ResponseWriter, r *http.Request, c caller) error {
	return g.endRun(w, r, c, "complete")
}

func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, c caller) error {
	return g.endRun(w, r, c, "fail")
}

func (g *Gateway) release(w http.ResponseWriter, r *http.Request, c caller) error {
	return g.endRun(w, r, c, "release")
}

// endRun hands an executor's outcome to the run's handler, and answers
// once the consumer wrote the run's end (or retries it): 200 with the
// outcome, 409 if the run was lost meanwhile, 202 if the write takes
// longer than EndWait.
func (g *Gateway) endRun(w http.ResponseWriter, r *http.Request, c caller, how string) error {
	var in endIn
	if err := decode(r, &in); err != nil {
		return err
	}
	ex, aerr := c.executorOf(in.Executor, nil)
	if aerr != nil {
		return aerr
	}
	if in.RunID == "" {
		return &apiError{http.StatusBadRequest, "run_id", "is required", nil}
	}
	o, aerr := outcomeOf(how, &in)
	if aerr != nil {
		return aerr
	}
	run, aerr := g.run(r.PathValue("collection"), in.RunID, ex.ID)
	if aerr != nil {
		return aerr
	}
	if in.Attempt != 0 && in.Attempt != run.attempt {
		return &apiError{http.StatusConflict, "attempt", fmt.Sprintf("attempt %d of run %q is over: the run was retried, and is at attempt %d", in.Attempt, in.RunID, run.attempt), nil}
	}
	if aerr := run.pool.refuseOversized(o.result); aerr != nil {
		return aerr
	}
	if how == "fail" && (in.Retry == nil || *in.Retry) && !run.retries() {
		o.err, o.final = mscheduler.SkipRetry(o.err), true // retries used up: the run fails now
	}
	ended := g.awaitEnd(in.RunID)
	defer g.forgetEnd(in.RunID, ended)
	if aerr := run.finish(o); aerr != nil {
		return aerr
	}
	return g.answerEnd(w, r.Context(), in.RunID, ended)
}

// outcomeOf is the handler's return for an end request.
func outcomeOf(how string, in *endIn) (runResult, *apiError) {
	switch how {
	case "complete":
		if in.Error != "" {
			return runResult{}, &apiError{http.StatusBadRequest, "error", "complete takes a result, not an error", nil}
		}
		if in.Retry != nil {
			return runResult{}, &apiError{http.StatusBadRequest, "retry", "complete takes a result, not retry", nil}
		}
		if len(in.Result) == 0 {
			return runResult{result: bson.RawValue{Type: bson.TypeNull}}, nil
		}
		v, err := fromJSON(in.Result)
		if err != nil {
			return runResult{}, &apiError{http.StatusBadRequest, "result", err.Error(), nil}
		}
		return runResult{result: v}, nil
	case "fail":
		if len(in.Result) > 0 {
			return runResult{}, &apiError{http.StatusBadRequest, "result", "fail takes an error, not a result", nil}
		}
		if in.Error == "" {
			return runResult{}, &apiError{http.StatusBadRequest, "error", "say why the run failed", nil}
		}
		err := errors.New(in.Error)
		if in.Retry != nil && !*in.Retry {
			return runResult{err: mscheduler.SkipRetry(err), final: true}, nil
		}
		return runResult{err: err}, nil
	default:
		for field, given := range map[string]bool{"result": len(in.Result) > 0, "error": in.Error != "", "retry": in.Retry != nil} {
			if given {
				return runResult{}, &apiError{http.StatusBadRequest, field, "release takes only run_id (and executor)", nil}
			}
		}
		return runResult{err: fmt.Errorf("released by its executor: %w", mscheduler.ErrRelease)}, nil
	}
}

// refuseOversized refuses a result larger than the consumer stores. Handed
// on, it would fail the run (counted towards MaxFailedRuns) for what the
// executor can still change: refused here, nothing is written and the run
// stays its executor's, to complete with a smaller result or to fail.
func (p *pool) refuseOversized(result bson.RawValue) *apiError {
	limit := p.consumer.MaxResultBytes()
	if len(result.Value) <= limit {
		return nil
	}
	return &apiError{http.StatusBadRequest, "result", fmt.Sprintf("is %d bytes as BSON, over the consumer's MaxResultBytes (%d): the run is still yours, complete it with a smaller result or fail it", len(result.Value), limit), nil}
}

// awaitEnd registers for the event that ends or retries a run.
func (g *Gateway) awaitEnd(runID string) chan mscheduler.Event {
	ch := make(chan mscheduler.Event, 1)
	g.mu.Lock()
	if g.ends == nil {
		g.ends = map[string]chan mscheduler.Event{}
	}
	g.ends[runID] = ch
	g.mu.Unlock()
	return ch
}

// forgetEnd drops an end request's registration, unless a later attempt
// of the same run (a local retry keeps the run id) registered since.
func (g *Gateway) forgetEnd(runID string, ch chan mscheduler.Event) {
	g.mu.Lock()
	if g.ends[runID] == ch {
		delete(g.ends, runID)
	}
	g.mu.Unlock()
}

// onEvent is the consumers' OnEvent: it tells a waiting end request what
// became of its run. It never blocks.
func (g *Gateway) onEvent(e mscheduler.Event) {
	switch e.Kind {
	case mscheduler.EventClaimed, mscheduler.EventRenewed, mscheduler.EventError, mscheduler.EventSkipped:
		return
	}
	g.mu.Lock()
	ch := g.ends[e.RunID]
	var pools []*pool
	if e.Kind != mscheduler.EventRetried {
		for _, pe := range g.pools {
			if pe.p != nil {
				pools = append(pools, pe.p)
			}
		}
	}
	g.mu.Unlock()
	for _, p := range pools {
		p.endRetryWait(e.RunID) // the run is over: no retry will come
	}
	if ch != nil {
		select {
		case ch <- e:
		default:
		}
	}
}

// endOutcomes are the answers to the events that settle an end request.
var endOutcomes = map[mscheduler.EventKind]string{
	mscheduler.EventSucceeded: "succeeded", mscheduler.EventFailed: "failed", mscheduler.EventReleased: "released",
	mscheduler.EventRetried: "retrying", mscheduler.EventCancelled: "cancelled", mscheduler.EventRevoked: "revoked",
}

func (g *Gateway) answerEnd(w http.ResponseWriter, ctx context.Context, runID string, ended chan mscheduler.Event) error {
	timer := time.NewTimer(g.cfg.EndWait)
	defer timer.Stop()
	select {
	case e := <-ended:
		if outcome, ok := endOutcomes[e.Kind]; ok {
			writeJSON(w, http.StatusOK, map[string]string{"run_id": runID, "outcome": outcome})
			return nil
		}
		return &apiError{http.StatusConflict, "run_id", fmt.Sprintf("the run's end was not recorded (%s): %v", e.Kind, e.Err), nil}
	case <-timer.C:
	case <-ctx.Done():
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"run_id": runID, "outcome": "pending"})
	return nil
}
