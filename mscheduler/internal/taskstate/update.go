package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Op is a query or update operator applied to a value: {name: v}.
func Op(name string, v any) bson.D { return bson.D{{Key: name, Value: v}} }

// update collects the operators of one update document.
type update struct {
	set, unset, inc, min, max, push, setOnInsert bson.D
}

func (u *update) Set(field string, v any)  { u.set = append(u.set, bson.E{Key: field, Value: v}) }
func (u *update) Unset(field string)       { u.unset = append(u.unset, bson.E{Key: field, Value: ""}) }
func (u *update) Inc(field string, by any) { u.inc = append(u.inc, bson.E{Key: field, Value: by}) }
func (u *update) Min(field string, v any)  { u.min = append(u.min, bson.E{Key: field, Value: v}) }
func (u *update) Max(field string, v any)  { u.max = append(u.max, bson.E{Key: field, Value: v}) }
func (u *update) Push(field string, v any) { u.push = append(u.push, bson.E{Key: field, Value: v}) }
func (u *update) has(field string) bool {
	for _, part := range []bson.D{u.set, u.unset, u.inc, u.min, u.max} {
		for _, e := range part {
			if e.Key == field {
				return true
			}
		}
	}
	return false
}

// doc is the update document, with only the operators used.
func (u *update) doc() bson.D {
	var out bson.D
	for _, part := range []struct {
		op     string
		fields bson.D
	}{{"$setOnInsert", u.setOnInsert}, {"$set", u.set}, {"$unset", u.unset}, {"$inc", u.inc}, {"$min", u.min}, {"$max", u.max}, {"$push", u.push}} {
		if len(part.fields) > 0 {
			out = append(out, bson.E{Key: part.op, Value: part.fields})
		}
	}
	return out
}

// EndsTask says update sets a status in which the task runs no more until
// a person acts: a final one, or invalid. The process's waiters hear of
// run ends; whoever applies such an update tells them too, as no run end
// will when no run is going.
func EndsTask(update bson.D) bool {
	for _, part := range update {
		if part.Key != "$set" {
			continue
		}
		fields, _ := part.Value.(bson.D)
		for _, f := range fields {
			if f.Key == stored.FStatus {
				s, _ := f.Value.(stored.Status)
				return s.Final() || s == stored.StatusInvalid
			}
		}
	}
	return false
}

// runsLeft is how many runs hold a task after a write, as far as the
// write knows.
type runsLeft int

const (
	noRunLeft   runsLeft = 0
	someRunLeft runsLeft = 1 // at least one, maybe more
)

// settle writes the fields bound to the status of a task that a write
// leaves in status with runs holding it or not; an empty status is one the
// write leaves as it is and knows not to be final (its case holds no final
// status, or runs are left). It is the one place that decides them, so
// that no transition sets a status and forgets one of them:
//   - expire_at is set exactly when the task is finished for good: a
//     final status and no run going (removed otherwise, or when kept
//     forever);
//   - the invalid note stays only on an invalid task;
//   - next_expiry, the sweep's bound on the holders' leases, goes with
//     the last holder.
func (u *update) settle(status stored.Status, left runsLeft, now time.Time, r Retention) {
	if left == noRunLeft && !u.has(stored.FNextExpiry) {
		u.Unset(stored.FNextExpiry)
	}
	if status == "" {
		u.Unset(stored.FExpireAt) // not finished for good; the note stays with what it is
		return
	}
	if status != stored.StatusInvalid {
		u.Unset(stored.FInvalid)
	}
	if exp := r.TaskExpiry(status, now); left == noRunLeft && exp != nil {
		u.Set(stored.FExpireAt, *exp)
	} else {
		u.Unset(stored.FExpireAt)
	}
}

// KeepForever is a retention that never deletes.
const KeepForever time.Duration = -1

// Retention is how long finished tasks and run records are kept.
type Retention struct {
	Succeeded time.Duration // succeeded and finished tasks, succeeded runs
	Failed    time.Duration // failed and cancelled tasks, runs of every other outcome
}

// TaskExpiry is when a task finished for good in status at now may be
// deleted; nil for a status that is not final, or kept forever.
func (r Retention) TaskExpiry(status stored.Status, now time.Time) *time.Time {
	switch status {
	case stored.StatusSucceeded, stored.StatusFinished:
		return expiry(r.Succeeded, now)
	case stored.StatusFailed, stored.StatusCancelled:
		return expiry(r.Failed, now)
	}
	return nil
}

// RunExpiry is when a run record that ended with outcome at now may be
// deleted; nil when kept forever.
func (r Retention) RunExpiry(outcome stored.Outcome, now time.Time) *time.Time {
	if outcome == stored.OutcomeSucceeded {
		return expiry(r.Succeeded, now)
	}
	return expiry(r.Failed, now)
}

func expiry(keep time.Duration, now time.Time) *time.Time {
	if keep <= 0 {
		return nil
	}
	t := now.Add(keep)
	return &t
}
