package mscheduler

import (
	"cmp"
	"time"

	"github.com/robfig/cron/v3"
)

// schedule is a validated plan, ready to compute planned times. Every
// planned time it yields is a whole millisecond, as stored, so that the
// planned time read back from a task is exactly the one computed.
type schedule struct {
	kind     PlanKind
	loc      *time.Location
	at       time.Time     // once
	every    int           // every
	unit     Unit          // every
	interval time.Duration // every, in seconds, minutes or hours; 0 for days
	weekday  time.Weekday
	day      int
	tod      TimeOfDay
	cron     cron.Schedule

	start, end time.Time // zero: unbounded (start is set at publish)
	limit      int       // runs allowed; -1 forever
	missed     MissedPolicy
	overrun    OverrunPolicy
	grace      time.Duration
}

// countCap bounds the planned times counted one by one; past it a count is
// extrapolated from the average spacing so far (only dense cron plans left
// unattended for a long time get there).
const countCap = 10_000

// next implements Plan.Next.
func (s *schedule) next(st PlanState, now time.Time) Step {
	if s.start.IsZero() && s.kind != PlanOnce {
		// Unset, Start is when the plan is published: now for a first
		// planned time, and any time up to Last afterwards (an every plan
		// keeps the grid through Last). A once plan needs none: At, even
		// if past, is judged by the missed-run policy.
		s.start = cmp.Or(st.Last, now)
	}
	var c0 time.Time
	if st.Last.IsZero() {
		c0 = s.atOrAfter(s.start)
	} else {
		c0 = s.after(st.Last)
	}
	policy, passed := s.missed, 0
	switch {
	case st.Started.IsZero() || c0.IsZero():
	case !c0.Before(st.Started): // every planned time since Last came during the run
		switch s.overrun {
		case OverrunSkip:
			policy = MissedSkip
		case OverrunQueue:
			policy = MissedCatchUp
		}
	case s.overrun == OverrunQueue && s.missed != MissedCatchUp:
		// The run started late: the planned times before its start were
		// missed (the late run stood for them), the ones during it queue.
		queued := s.atOrAfter(st.Started)
		passed = s.count(c0, cmp.Or(queued, s.beyond()))
		c0, policy = queued, MissedCatchUp
	}
	return s.choose(c0, passed, st.Runs+st.Skipped, st.SkipNext, now, policy)
}

// atStart decides what the first start of the occurrence planned at
// planned does at now, under policy: run it (Next == planned), run a later
// planned time in its place, or wait for a later one. used is the number
// of planned times before it that ran or were skipped.
func (s *schedule) atStart(planned time.Time, used, skipNext int, now time.Time, policy MissedPolicy) Step {
	return s.choose(s.atOrAfter(planned), 0, used, skipNext, now, policy)
}

// choose picks the planned time to run from the first candidate c0 on;
// passed planned times before c0 were already skipped, and used planned
// times came before those. Repeat bounds the planned times, run or
// skipped: the one whose count would pass it does not exist.
func (s *schedule) choose(c0 time.Time, passed, used, skipNext int, now time.Time, policy MissedPolicy) Step {
	step := s.chooseUnbounded(c0, passed, skipNext, now, policy)
	if s.limit < 0 {
		return step
	}
	left := max(s.limit-used, 0)
	if step.Done || used+step.Skipped >= s.limit {
		return Step{Skipped: min(step.Skipped, left), Done: true}
	}
	return step
}

func (s *schedule) chooseUnbounded(c0 time.Time, passed, skipNext int, now time.Time, policy MissedPolicy) Step {
	skipped := passed
	if s.kind == PlanEvery && s.interval > 0 && skipNext > 0 && !c0.IsZero() { // no need to walk a fixed grid
		target := c0.Add(time.Duration(skipNext) * s.interval)
		if !s.end.IsZero() && target.After(s.end) {
			return Step{Skipped: skipped + s.count(c0, s.beyond()), Done: true}
		}
		c0, skipped, skipNext = target, skipped+skipNext, 0
	}
	for ; skipNext > 0 && !c0.IsZero(); skipNext-- {
		c0 = s.after(c0)
		skipped++
	}
	if c0.IsZero() {
		return Step{Skipped: skipped, Done: true}
	}
	next := c0
	switch policy {
	case MissedRunOnce:
		if !c0.After(now) {
			next = s.latestAtOrBefore(c0, now)
		}
	case MissedSkip:
		// The latest planned time that has come runs if it is at most
		// grace late; the earlier ones are skipped.
		if !c0.After(now) {
			if l := s.latestAtOrBefore(c0, now); !l.Before(now.Add(-s.grace)) {
				next = l
			} else {
				next = s.after(now)
			}
		}
	}
	if next.IsZero() {
		return Step{Skipped: skipped + s.count(c0, s.beyond()), Done: true}
	}
	return Step{Next: next, Skipped: skipped + s.count(c0, next)}
}

// beyond is a time after every planned time.
func (s *schedule) beyond() time.Time {
	if s.end.IsZero() {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return s.end.Add(time.Millisecond)
}

// after is the first planned time after t, or zero if none is left.
func (s *schedule) after(t time.Time) time.Time {
	return s.atOrAfter(t.Truncate(time.Millisecond).Add(time.Millisecond))
}

// atOrAfter is the first planned time at or after t within the window, or
// zero if none is left.
func (s *schedule) atOrAfter(t time.Time) time.Time {
	if t.Before(s.start) {
		t = s.start
	}
	var c time.Time
	switch s.kind {
	case PlanOnce:
		if !s.at.Before(t) && !s.at.Before(s.start) {
			c = s.at
		}
	case PlanEvery:
		c = s.everyAtOrAfter(t)
	default:
		c = s.wallAtOrAfter(t)
	}
	if c.IsZero() || (!s.end.IsZero() && c.After(s.end)) {
		return time.Time{}
	}
	return c
}

func (s *schedule) everyAtOrAfter(t time.Time) time.Time {
	if s.interval > 0 {
		k := (t.Sub(s.start) + s.interval - 1) / s.interval
		return s.start.Add(max(k, 0) * s.interval)
	}
	// Calendar days: estimate the step count, then walk to the exact one.
	w0 := wallOf(s.start, s.loc)
	k := max(int(t.Sub(s.start)/(time.Duration(s.every)*24*time.Hour))-1, 0)
	for ; ; k++ {
		c := s.start // the anchor itself, even when its wall time exists twice
		if k > 0 {
			c = instantOf(w0.AddDate(0, 0, k*s.every), s.loc).Truncate(time.Millisecond)
		}
		if !c.Before(t) && !c.Before(s.start) {
			return c
		}
	}
}

// dstMargin is more than any DST shift.
const dstMargin = 3 * time.Hour

// wallAtOrAfter walks the wall times of a weekly, monthly or cron plan to
// the first whose instant is at or after t. Two wall times in a DST gap map
// to the same instant; the walk's strict order keeps only the first.
func (s *schedule) wallAtOrAfter(t time.Time) time.Time {
	w := wallOf(t, s.loc)
	// Just after clocks jumped forward, wall times in the gap map to t.
	_, offset := t.In(s.loc).Zone()
	if _, before := t.Add(-dstMargin).In(s.loc).Zone(); offset > before {
		w = w.Add(-time.Duration(offset-before) * time.Second)
	}
	for i := 0; i < 100_000; i++ {
		c := s.wallAtOrAfterWall(w)
		if c.IsZero() {
			return time.Time{}
		}
		if at := instantOf(c, s.loc); !at.Before(t) {
			return at
		}
		w = c.Add(time.Second)
	}
	return time.Time{}
}

// wallAtOrAfterWall is the first wall time of the plan at or after wall
// time w, or zero if there is none.
func (s *schedule) wallAtOrAfterWall(w time.Time) time.Time {
	switch s.kind {
	case PlanWeekly:
		c := atTime(w, s.tod).AddDate(0, 0, (int(s.weekday)-int(w.Weekday())+7)%7)
		if c.Before(w) {
			c = c.AddDate(0, 0, 7)
		}
		return c
	case PlanMonthly:
		for m := 0; m < 2; m++ {
			first := time.Date(w.Year(), w.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC)
			c := atTime(first.AddDate(0, 0, monthDay(s.day, first.Year(), first.Month())-1), s.tod)
			if !c.Before(w) {
				return c
			}
		}
		return time.Time{} // not reached: next month's date is after w
	case PlanCron:
		// cron's Next is strictly after its argument, in whole seconds.
		ceil := w.Truncate(time.Second)
		if ceil.Before(w) {
			ceil = ceil.Add(time.Second)
		}
		return s.cron.Next(ceil.Add(-time.Second))
	}
	return time.Time{}
}

// latestAtOrBefore is the last planned time at or before now, starting from
// c0 (a planned time at or before now).
func (s *schedule) latestAtOrBefore(c0, now time.Time) time.Time {
	if !s.end.IsZero() && now.After(s.end) {
		now = s.end
	}
	if s.kind == PlanEvery && s.interval > 0 {
		k := now.Sub(s.start) / s.interval
		return s.start.Add(k * s.interval)
	}
	// Find a planned time near now by looking back over doubling spans,
	// then walk forward to the last one at or before now.
	from := c0
	for span := time.Minute; ; span *= 2 {
		x := now.Add(-span)
		if !x.After(c0) {
			break
		}
		if c := s.atOrAfter(x); !c.IsZero() && !c.After(now) {
			from = c
			break
		}
	}
	for {
		n := s.after(from)
		if n.IsZero() || n.After(now) {
			return from
		}
		from = n
	}
}

// upcoming lists up to n planned times from step on, as the workers run
// them when each runs on time: after each, the next planned time that
// follows it.
func (s *schedule) upcoming(step Step, st PlanState, n int) []time.Time {
	var out []time.Time
	for len(out) < n && !step.Done {
		out = append(out, step.Next)
		st = PlanState{Last: step.Next, Runs: st.Runs + 1, Skipped: st.Skipped + step.Skipped}
		step = s.next(st, step.Next)
	}
	return out
}

// count is the number of planned times in [a, b).
func (s *schedule) count(a, b time.Time) int {
	if a.IsZero() || !a.Before(b) {
		return 0
	}
	if s.kind == PlanEvery && s.interval > 0 {
		return int((b.Sub(a) + s.interval - 1) / s.interval)
	}
	n := 0
	for c := a; !c.IsZero() && c.Before(b); c = s.after(c) {
		n++
		if n == countCap {
			spacing := c.Sub(a) / time.Duration(n-1)
			return n + int(b.Sub(c)/max(spacing, time.Millisecond))
		}
	}
	return n
}
