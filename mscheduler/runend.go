package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// runEnd is the write that ends one run: it removes the run's holder entry,
// appends its record and moves the task's counters and status, in one
// update command, fenced on the run.
//
// MongoDB cannot set a status from the counters in one plain update, so the
// write is a list of update statements whose filters split every possible
// task state into disjoint cases, each with its own status change. The fence
// goes in every filter, so at most one statement can match; if none matches
// and the run still holds its slot, a concurrent write moved the task
// between cases, and the write is built again from a fresh read.
type runEnd struct {
	key      string
	workerID string
	record   runRecord
	fence    bson.D // fence or leaseFence of the run

	distinct      bool      // on success, remember the worker in done_by
	maxFailedRuns int       // the task's max_failed_runs, as last read
	retryAt       time.Time // on a counted failure, run_at is moved to at least this
	now           time.Time
	runsKept      int
	retention     Retention // of the task, when this end finishes it

	// seen is the task's state as this worker last read it; it picks the
	// case to try alone first, which saves the server from evaluating every
	// case when nothing moved since the read.
	seen taskState

	// advance is set for a task with a plan: a run end that completes the
	// occurrence moves the task to its next planned time instead of
	// finishing it.
	advance *planAdvance
}

// taskState is the part of a task that decides how a run end changes it.
type taskState struct {
	Status     Status `bson:"status"`
	Running    int    `bson:"running"`
	Free       int    `bson:"free"`
	FailedRuns int    `bson:"failed_runs"`
}

// counted reports whether the outcome counts towards max_failed_runs.
func (e *runEnd) counted() bool {
	return e.record.Outcome == OutcomeFailed || e.record.Outcome == OutcomeExpired
}

// freeDelta is how much the run's end gives back to the task's free slots:
// a success consumes its slot for good.
func (e *runEnd) freeDelta() int {
	if e.record.Outcome == OutcomeSucceeded {
		return 0
	}
	return 1
}

type endCase struct {
	filter      bson.D
	status      Status // empty: status unchanged
	lastHolder  bool
	description string
	likely      bool // the seen state falls in this case
	advance     bool // the occurrence is complete: move to the next planned time
}

func (e *runEnd) cases() []endCase {
	cases := e.plainCases()
	if e.advance == nil {
		return cases
	}
	// With a plan, an occurrence that completes with the last run moves the
	// task on. One that completes while other runs of it are going is
	// marked succeeded or failed as a plain task is, and the last of those
	// runs moves it on when it ends.
	completed := bson.E{Key: fStatus, Value: op("$in", bson.A{StatusSucceeded, StatusFailed})}
	neither := bson.E{Key: fStatus, Value: op("$nin", bson.A{StatusRunning, StatusSucceeded, StatusFailed})}
	wasCompleted := e.seen.Status == StatusSucceeded || e.seen.Status == StatusFailed
	out := make([]endCase, 0, len(cases)+1)
	for _, c := range cases {
		switch {
		case c.description == caseNotRunning:
			out = append(out,
				endCase{filter: bson.D{c.filter[0], completed}, lastHolder: true, advance: true,
					description: "occurrence completed, last run ended", likely: c.likely && wasCompleted},
				endCase{filter: bson.D{c.filter[0], neither}, lastHolder: true,
					description: caseNotRunning, likely: c.likely && !wasCompleted})
		case c.lastHolder && (c.status == StatusSucceeded || c.status == StatusFailed):
			c.advance = true
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	return out
}

const caseNotRunning = "task no longer running"

func (e *runEnd) plainCases() []endCase {
	d := e.freeDelta()
	m := e.maxFailedRuns
	last := bson.E{Key: fRunning, Value: 1}
	notLast := bson.E{Key: fRunning, Value: op("$ne", 1)}
	running := bson.E{Key: fStatus, Value: StatusRunning}
	notRunning := bson.E{Key: fStatus, Value: op("$ne", StatusRunning)}
	satisfied := bson.E{Key: fFree, Value: op("$lte", -d)} // free after this end <= 0
	unsatisfied := bson.E{Key: fFree, Value: op("$gt", -d)}
	exhausted := bson.D{{Key: fMaxFailedRuns, Value: m}, {Key: fFailedRuns, Value: op("$gte", m-1)}}
	notExhausted := bson.D{{Key: fMaxFailedRuns, Value: m}, {Key: fFailedRuns, Value: op("$lt", m-1)}}

	// The same conditions on the seen state, to pick the likely case.
	s := e.seen
	isLast, isRunning := s.Running == 1, s.Status == StatusRunning
	isSatisfied, isExhausted := s.Free <= -d, s.FailedRuns >= m-1

	cases := []endCase{
		{filter: bson.D{last, notRunning}, lastHolder: true, description: caseNotRunning,
			likely: isLast && !isRunning},
		{filter: bson.D{last, running, satisfied}, status: StatusSucceeded, lastHolder: true, description: "enough successes",
			likely: isLast && isRunning && isSatisfied},
	}
	if !e.counted() {
		return append(cases,
			endCase{filter: bson.D{last, running, unsatisfied}, status: StatusPending, lastHolder: true, description: "slots left",
				likely: isLast && isRunning && !isSatisfied},
			endCase{filter: bson.D{notLast}, description: "other runs going",
				likely: !isLast},
		)
	}
	return append(cases,
		endCase{filter: append(bson.D{last, running, unsatisfied}, exhausted...), status: StatusFailed, lastHolder: true, description: "failed runs exhausted",
			likely: isLast && isRunning && !isSatisfied && isExhausted},
		endCase{filter: append(bson.D{last, running, unsatisfied}, notExhausted...), status: StatusPending, lastHolder: true, description: "may be tried again",
			likely: isLast && isRunning && !isSatisfied && !isExhausted},
		endCase{filter: append(bson.D{notLast, running}, exhausted...), status: StatusFailed, description: "failed runs exhausted, other runs going",
			likely: !isLast && isRunning && isExhausted},
		endCase{filter: bson.D{notLast, {Key: "$or", Value: bson.A{bson.D{notRunning}, notExhausted}}}, description: "other runs going",
			likely: !isLast && (!isRunning || !isExhausted)},
	)
}

func (e *runEnd) filter(c endCase) bson.D {
	f := append(append(bson.D{}, e.fence...), c.filter...)
	if c.advance {
		f = append(f, e.advance.fence()...)
	}
	return f
}

// likelyCase is the case the seen state falls in, if any.
func (e *runEnd) likelyCase() (endCase, bool) {
	for _, c := range e.cases() {
		if c.likely {
			return c, true
		}
	}
	return endCase{}, false
}

// tryLikely writes the likely case alone and reports whether it matched.
func (e *runEnd) tryLikely(ctx context.Context, coll *mongo.Collection) (bool, error) {
	c, ok := e.likelyCase()
	if !ok {
		return false, nil
	}
	res, err := coll.UpdateOne(ctx, e.filter(c), e.update(c))
	if err != nil {
		return false, err
	}
	return res.MatchedCount > 0, nil
}

func (e *runEnd) update(c endCase) bson.D {
	if c.advance && !e.advance.step.Done {
		return e.advanceUpdate()
	}
	unset := bson.D{{Key: holderPath(e.workerID), Value: ""}}
	if c.lastHolder {
		unset = append(unset, bson.E{Key: fNextExpiry, Value: ""})
	}
	inc := bson.D{{Key: fRunning, Value: -1}, {Key: fRev, Value: 1}}
	if d := e.freeDelta(); d != 0 {
		inc = append(inc, bson.E{Key: fFree, Value: d})
	}
	switch {
	case e.record.Outcome == OutcomeSucceeded:
		inc = append(inc, bson.E{Key: fSucceeded, Value: 1})
	case e.counted():
		inc = append(inc, bson.E{Key: fFailedRuns, Value: 1})
	}
	push := e.pushRecord()
	if e.distinct && e.record.Outcome == OutcomeSucceeded {
		push = append(push, bson.E{Key: fDoneBy, Value: e.workerID})
	}
	set := bson.D{{Key: fUpdatedAt, Value: e.now}, e.unloggedMark()}
	if e.advance != nil {
		set = append(set, bson.E{Key: pStarted, Value: true})
	}
	if c.advance { // the plan is done
		c.status = StatusFinished
		inc = append(inc, bson.E{Key: pRuns, Value: 1}, bson.E{Key: pSkipped, Value: e.advance.step.Skipped}, bson.E{Key: pMissedCount, Value: e.advance.missed()})
		set = append(set, bson.E{Key: pSkipNext, Value: 0})
	}
	if c.status != "" {
		set = append(set, bson.E{Key: fStatus, Value: c.status})
		if exp := e.retention.taskExpiry(c.status, e.now); exp != nil {
			set = append(set, bson.E{Key: fExpireAt, Value: *exp})
		}
	}
	update := bson.D{
		{Key: "$unset", Value: unset},
		{Key: "$inc", Value: inc},
		{Key: "$push", Value: push},
		{Key: "$set", Value: set},
	}
	if e.counted() && !e.retryAt.IsZero() && !c.advance {
		update = append(update, bson.E{Key: "$max", Value: bson.D{{Key: fRunAt, Value: e.retryAt}}})
	}
	return update
}

// pushRecord appends the run's record to the task's runs.
func (e *runEnd) pushRecord() bson.D {
	return bson.D{{Key: fRuns, Value: bson.D{{Key: "$each", Value: bson.A{e.record}}, {Key: "$slice", Value: -e.runsKept}}}}
}

// unloggedMark says, in the same update that ends the run, that its entry
// in the history collection is still to be written (see historian), so
// that a crash before it is written loses no history record.
func (e *runEnd) unloggedMark() bson.E {
	return bson.E{Key: unloggedPath(e.record.RunID), Value: e.record.Finished}
}

// errRunGone says the run no longer holds its slot: its lease was lost.
var errRunGone = errors.New("run no longer holds its slot")

// maxEndTries is how often a run end is rebuilt at once after concurrent
// writes moved the task between cases; past it, each try waits a moment so
// that the writers moving it fall out of step.
const maxEndTries = 5

// write applies the run end. It returns errRunGone when the fence matches
// nothing: another worker took the slot, and nothing was written. It tries
// until it succeeds or ctx ends.
func (e *runEnd) write(ctx context.Context, coll *mongo.Collection) error {
	for try := 0; ; try++ {
		done, err := e.tryLikely(ctx, coll)
		if err != nil {
			return fmt.Errorf("mscheduler: end run %s of %q: %w", e.record.RunID, e.key, err)
		}
		if done {
			return nil
		}
		held, err := e.reread(ctx, coll)
		if err != nil {
			return err
		}
		if !held {
			return e.goneOrApplied(ctx, coll)
		}
		if try >= maxEndTries {
			select {
			case <-ctx.Done():
				return fmt.Errorf("mscheduler: end run %s of %q: the task kept changing: %w", e.record.RunID, e.key, ctx.Err())
			case <-time.After(jitter(10 * time.Millisecond)):
			}
		}
	}
}

// goneOrApplied tells, once the run no longer holds its slot, whether an
// earlier try of this very write was applied (its reply lost or late: the
// task then carries this end's history mark or record, with its finish
// time; a sweep that expired the run would have written its own time) or
// another worker took the slot.
func (e *runEnd) goneOrApplied(ctx context.Context, coll *mongo.Collection) error {
	filter := bson.D{{Key: fID, Value: e.key}, {Key: "$or", Value: bson.A{
		bson.D{{Key: unloggedPath(e.record.RunID), Value: e.record.Finished}},
		// The mark is gone once the record is in the history (the
		// maintenance pass writes it after a while); the kept record stays.
		bson.D{{Key: fRuns, Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "run_id", Value: e.record.RunID}, {Key: "finished", Value: e.record.Finished}}}}}},
	}}}
	err := coll.FindOne(ctx, filter, options.FindOne().SetProjection(bson.D{{Key: fID, Value: 1}})).Err()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return errRunGone
	case err != nil:
		return fmt.Errorf("mscheduler: read task %q: %w", e.key, err)
	}
	return nil
}

// reread reports whether the fence still matches, and refreshes the seen
// state and max_failed_runs (an operator may have changed it).
func (e *runEnd) reread(ctx context.Context, coll *mongo.Collection) (bool, error) {
	raw, err := coll.FindOne(ctx, e.fence, options.FindOne().SetProjection(rereadProjection())).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mscheduler: read task %q: %w", e.key, err)
	}
	return true, e.refresh(raw)
}

// rereadProjection is what a run end reads of its task to pick its case.
func rereadProjection() bson.D {
	return bson.D{{Key: fMaxFailedRuns, Value: 1}, {Key: fStatus, Value: 1}, {Key: fRunning, Value: 1}, {Key: fFree, Value: 1}, {Key: fFailedRuns, Value: 1},
		{Key: fConcurrency, Value: 1}, {Key: pSkipNext, Value: 1}, {Key: pPlanned, Value: 1}, {Key: pRuns, Value: 1}, {Key: pSkipped, Value: 1}}
}

// refresh takes the seen state, max_failed_runs and plan position from a
// read of the task with rereadProjection.
func (e *runEnd) refresh(raw bson.Raw) error {
	var doc struct {
		MaxFailedRuns int       `bson:"max_failed_runs"`
		State         taskState `bson:",inline"`
		Concurrency   int       `bson:"concurrency"`
		Plan          struct {
			SkipNext int       `bson:"skip_next"`
			Planned  time.Time `bson:"planned"`
			Runs     int       `bson:"runs"`
			Skipped  int       `bson:"skipped"`
		} `bson:"plan"`
	}
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return &unreadableError{key: e.key, prob: &problem{field: "(document)", reason: fmt.Sprintf("cannot be decoded: %v", err)}}
	}
	e.maxFailedRuns, e.seen = doc.MaxFailedRuns, doc.State
	if e.advance != nil {
		// The run's occurrence is the one the task is at: only this run's
		// own claim could move it since (or an operator's edit).
		e.advance.planned, e.advance.runs, e.advance.skipped = doc.Plan.Planned, doc.Plan.Runs, doc.Plan.Skipped
		e.advance.refresh(doc.Concurrency, doc.Plan.SkipNext)
		planned := doc.Plan.Planned
		e.record.Planned = &planned
	}
	return nil
}
