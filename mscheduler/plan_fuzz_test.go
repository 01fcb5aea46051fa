package mscheduler_test

import (
	"testing"
	"time"
	_ "time/tzdata" // zones without system data

	"github.com/mscheduler/mscheduler/mscheduler"
)

// fuzzZones are the zones of fuzzed plans: no DST, a one-hour DST in each
// hemisphere of the calendar, and Lord Howe's half-hour DST.
var fuzzZones = []string{"UTC", newYork, berlin, lordHowe}

// fuzzCrons keep at least 30 s between planned times, so that counting
// the planned times of the fuzzed spans (a few days) stays fast.
var fuzzCrons = []string{
	"* * * * *",
	"*/30 * * * * *",
	"0 * * * *",
	"30 2 * * *",
	"30 1 * * *",
	"0 9 * * 1-5",
	"15 10 1 * *",
	"0 0 31 * *",
	"0 0 29 2 *",
	"0 0,30 1,2,3 * * 0",
	"@daily",
	"@weekly",
	"@monthly",
	"not a cron",
}

// fuzzBases are the instants fuzzed times are offsets from: DST changes of
// the fuzzed zones, a leap February and an ordinary day.
var fuzzBases = []time.Time{
	time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC),   // New York spring forward
	time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),  // New York fall back
	time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC),  // Berlin spring forward
	time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), // Berlin fall back
	time.Date(2026, 4, 4, 15, 0, 0, 0, time.UTC),  // Lord Howe fall back
	time.Date(2026, 10, 3, 15, 30, 0, 0, time.UTC),
	time.Date(2028, 2, 28, 12, 0, 0, 0, time.UTC),
	time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC),
}

// fuzzSpan bounds the fuzzed offsets, in milliseconds either side of the
// base.
const fuzzSpan = int64(3 * 24 * time.Hour / time.Millisecond)

// mod is the non-negative remainder of a by n.
func mod[T int | int64](a, n T) T {
	r := a % n
	if r < 0 {
		r += n
	}
	return r
}

// wrap maps any v into lo..hi, leaving the values already there as they are.
func wrap(v, lo, hi int) int { return lo + mod(v-lo, hi-lo+1) }

// offset maps any fuzzed int64 to an instant within fuzzSpan of base,
// leaving the offsets already within it as they are.
func offset(base time.Time, off int64) time.Time {
	return base.Add(time.Duration(mod(off+fuzzSpan, 2*fuzzSpan+1)-fuzzSpan) * time.Millisecond)
}

// Bits of the set argument of FuzzPlanNext.
const (
	setStart = 1 << iota
	setEnd
	setLast
	setStarted
	setGrace
)

func FuzzPlanNext(f *testing.F) {
	// kind, every, unit, weekday, day, hour, minute, zone, missed, overrun,
	// repeat, base, set, atOff, startOff, endOff, lastOff, now1Off, now2Off,
	// runs, skipNext
	type seed struct {
		kind, every, unit, weekday, day, hour, minute, zone, missed, overrun, repeat int
		base, set                                                                    uint8
		at, start, end, last, now1, now2                                             int64
		runs, skipNext                                                               int
	}
	h := int64(time.Hour / time.Millisecond)
	m := int64(time.Minute / time.Millisecond)
	seeds := []seed{
		// every 3 minutes, last at the base, now 10 minutes on: each policy
		{kind: 1, every: 3, unit: 1, set: setStart | setLast, now1: 10 * m, now2: 11 * m, runs: 1},
		{kind: 1, every: 3, unit: 1, missed: 2, set: setStart | setLast, now1: 10 * m, now2: 11 * m, runs: 1},
		{kind: 1, every: 3, unit: 1, missed: 3, set: setStart | setLast, now1: 10 * m, now2: 11 * m, runs: 1},
		// overrun
		{kind: 1, every: 2, unit: 1, overrun: 2, set: setStart | setLast | setStarted, now1: 6*m + 50, now2: m, runs: 1},
		{kind: 1, every: 2, unit: 1, missed: 2, overrun: 1, set: setStart | setLast | setStarted, now1: 6*m + 50, runs: 1},
		// every day in each zone, across the DST changes
		{kind: 1, every: 1, unit: 3, zone: 1, base: 0, set: setStart | setLast, start: -h / 2, last: -h / 2, now1: m, now2: 2 * h, runs: 1},
		{kind: 1, every: 1, unit: 3, zone: 2, base: 3, set: setStart, start: -24 * h, now1: -23 * h, now2: 30 * h},
		{kind: 1, every: 2, unit: 3, zone: 3, base: 4, set: setStart | setEnd, start: -30 * h, end: 40 * h, now1: 50 * h, now2: h},
		{kind: 1, every: 32766, unit: 0, set: setStart, now1: h},
		{kind: 1, every: 0, unit: 1}, // invalid
		// weekly and monthly at times in DST gaps and overlaps
		{kind: 2, weekday: 0, hour: 2, minute: 30, zone: 1, base: 0, now1: -20 * h, now2: 2 * h},
		{kind: 2, weekday: 0, hour: 1, minute: 30, zone: 1, base: 1, set: setLast, last: -h / 2, now1: 0, now2: h, runs: 1},
		{kind: 2, weekday: 6, hour: 23, minute: 59, zone: 3, base: 5, missed: 3, now1: 2 * h},
		{kind: 3, day: 29, hour: 2, minute: 30, zone: 2, base: 2, now1: -48 * h, now2: 48 * h},
		{kind: 3, day: 0, hour: 9, base: 6, now1: 0, now2: 40 * h},
		{kind: 3, day: -1, hour: 9, base: 6, missed: 2, set: setLast, last: -40 * h, now1: 60 * h, runs: 1},
		{kind: 3, day: -31, base: 7, now1: h},
		{kind: 3, day: 32, base: 7}, // invalid
		// cron
		{kind: 4, minute: 3, zone: 1, base: 0, now1: -10 * h, now2: 10 * h},
		{kind: 4, minute: 4, zone: 1, base: 1, set: setLast, last: -h / 2, now1: 0, runs: 1},
		{kind: 4, minute: 2, zone: 2, base: 3, set: setLast, last: -h, now1: 3 * h, now2: h, missed: 3, runs: 1},
		{kind: 4, minute: 1, zone: 3, base: 4, set: setStart | setEnd | setGrace, start: -h, end: h, now1: 30 * m, now2: 3 * h},
		{kind: 4, minute: 9, zone: 3, base: 5, set: setLast, last: -2 * h, now1: h, missed: 2, runs: 1, skipNext: 2},
		{kind: 4, minute: 8, base: 6, now1: 0, now2: 70 * h},
		{kind: 4, minute: 13}, // invalid cron
		// once
		{kind: 0, at: h, now1: 0, now2: 2 * h},
		{kind: 0, at: -h, now1: 0, missed: 2},
		{kind: 0, at: -h, now1: 0, missed: 3, set: setStart, start: -2 * h},
		{kind: 0, at: 0, set: setLast, last: 0, now1: m, runs: 1},
		// repeat, window, skip next
		{kind: 1, every: 10, unit: 1, repeat: 3, set: setStart | setLast, last: 20 * m, now1: 21 * m, runs: 2},
		{kind: 1, every: 10, unit: 1, set: setStart | setEnd | setLast, end: h, last: 20 * m, now1: 2 * h, now2: 3 * h, runs: 3},
		{kind: 1, every: 10, unit: 1, set: setStart | setEnd, end: 20 * m, now1: -m, skipNext: 3},
		{kind: 5}, // invalid kind
	}
	for _, s := range seeds {
		f.Add(s.kind, s.every, s.unit, s.weekday, s.day, s.hour, s.minute, s.zone, s.missed, s.overrun, s.repeat,
			s.base, s.set, s.at, s.start, s.end, s.last, s.now1, s.now2, s.runs, s.skipNext)
	}

	f.Fuzz(func(t *testing.T, kind, every, unit, weekday, day, hour, minute, zoneSel, missedSel, overrunSel, repeatN int,
		baseSel, set uint8, atOff, startOff, endOff, lastOff, now1Off, now2Off int64, runs, skipNext int) {
		base := fuzzBases[int(baseSel)%len(fuzzBases)]
		var p mscheduler.Plan
		switch mod(kind, 6) {
		case 0:
			p = mscheduler.Once(offset(base, atOff))
		case 1:
			units := []mscheduler.Unit{mscheduler.Second, mscheduler.Minute, mscheduler.Hour, mscheduler.Day, "week"}
			p = mscheduler.Every(every, units[mod(unit, len(units))])
		case 2:
			p = mscheduler.Weekly(time.Weekday(wrap(weekday, -1, 7)), wrap(hour, -1, 24), wrap(minute, -1, 60))
		case 3:
			p = mscheduler.Monthly(wrap(day, -33, 33), wrap(hour, -1, 24), wrap(minute, -1, 60))
		case 4:
			p = mscheduler.Cron(fuzzCrons[mod(minute, len(fuzzCrons))])
		case 5:
			p = mscheduler.Plan{Kind: "yearly"}
		}
		p.Zone = fuzzZones[mod(zoneSel, len(fuzzZones))]
		p.Missed = []mscheduler.MissedPolicy{"", mscheduler.MissedSkip, mscheduler.MissedCatchUp, mscheduler.MissedRunOnce, "never"}[mod(missedSel, 5)]
		p.Overrun = []mscheduler.OverrunPolicy{mscheduler.OverrunAsMissed, mscheduler.OverrunSkip, mscheduler.OverrunQueue, "later"}[mod(overrunSel, 4)]
		if repeatN != 0 { // 0 keeps the constructor's default
			p.Repeat = wrap(repeatN, -2, 3)
		}
		if set&setStart != 0 {
			p.Start = offset(base, startOff)
		}
		if set&setEnd != 0 {
			p.End = offset(base, endOff)
		}
		if set&setGrace != 0 {
			p.Grace = time.Duration(mod(atOff, int64(10*time.Minute/time.Millisecond))) * time.Millisecond
		}
		if err := p.Validate(); err != nil {
			t.Logf("invalid plan: %v", err)
			if _, nerr := p.Next(mscheduler.PlanState{}, base); nerr == nil {
				t.Fatalf("Validate: %v, but Next accepts the plan", err)
			}
			return
		}

		st := mscheduler.PlanState{Runs: mod(runs, 5), Skipped: mod(runs/5, 3), SkipNext: mod(skipNext, 4)}
		if set&setLast != 0 {
			st.Last = offset(base, lastOff)
			if set&setStarted != 0 {
				st.Started = st.Last.Add(time.Duration(mod(now2Off, int64(time.Hour/time.Millisecond))) * time.Millisecond)
			}
		}
		now1 := offset(base, now1Off)
		now2 := now1.Add(time.Duration(mod(now2Off, 2*fuzzSpan)) * time.Millisecond)

		nextAt := func(st mscheduler.PlanState, now time.Time) mscheduler.Step {
			t.Helper()
			step, err := p.Next(st, now)
			if err != nil {
				t.Fatalf("Next on a valid plan %+v: %v", p, err)
			}
			checkStep(t, p, st, now, step)
			return step
		}
		s1 := nextAt(st, now1)
		s2 := nextAt(st, now2)
		if s1.Done && !s2.Done {
			t.Fatalf("plan %+v, state %+v: done at now %s but not at the later %s (next %s)",
				p, st, now1, now2, s2.Next)
		}
		if !s1.Done && !s2.Done && s2.Next.Before(s1.Next) {
			t.Fatalf("plan %+v, state %+v: next %s at now %s, but earlier %s at the later now %s",
				p, st, s1.Next, now1, s2.Next, now2)
		}

		// Chain: each planned time becomes Last; runs start on time.
		cur, now := st, now1
		prev := s1
		for i := 0; i < 20 && !prev.Done; i++ {
			cur = mscheduler.PlanState{Last: prev.Next, Runs: cur.Runs + 1, Skipped: cur.Skipped + prev.Skipped}
			if prev.Next.After(now) {
				now = prev.Next
			}
			step := nextAt(cur, now)
			if !step.Done && !step.Next.After(prev.Next) {
				t.Fatalf("plan %+v: chain step %d: next %s not after the previous %s", p, i, step.Next, prev.Next)
			}
			prev = step
		}
	})
}

// checkStep checks the invariants of one step.
func checkStep(t *testing.T, p mscheduler.Plan, st mscheduler.PlanState, now time.Time, s mscheduler.Step) {
	t.Helper()
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%s\nplan %+v\nstate %+v\nnow %s\nstep %+v", what, p, st, now.UTC(), s)
	}
	if s.Skipped < 0 {
		fail("negative Skipped")
	}
	// Repeat counts planned times: none beyond it is run or skipped.
	if limit := max(p.Repeat, 1); p.Repeat >= 0 && st.Runs+st.Skipped+s.Skipped > max(limit, st.Runs+st.Skipped) {
		fail("more planned times used than Repeat allows")
	}
	if s.Done {
		if !s.Next.IsZero() {
			fail("Done with a Next")
		}
		return
	}
	if s.Next.IsZero() {
		fail("not Done, but no Next")
	}
	// The missed-run policy that applies to every planned time: the
	// overrun policy is out of play without a known start or when it
	// defers to the missed-run policy.
	policy := p.Missed
	if policy == "" {
		policy = mscheduler.MissedSkip
	}
	if !st.Started.IsZero() && p.Overrun != mscheduler.OverrunAsMissed {
		policy = "mixed"
	}
	grace := p.Grace
	if grace == 0 {
		grace = mscheduler.GraceDefault
	}
	switch policy {
	case mscheduler.MissedSkip:
		if s.Next.Before(now.Truncate(time.Millisecond).Add(-grace)) {
			fail("skip policy: Next more than Grace before now")
		}
	case mscheduler.MissedCatchUp:
		if s.Skipped > st.SkipNext {
			fail("catch-up policy: skipped more than SkipNext")
		}
	}
	if !st.Last.IsZero() && !s.Next.After(st.Last) {
		fail("Next not after Last")
	}
	if !p.Start.IsZero() && s.Next.Before(p.Start) {
		fail("Next before Start")
	}
	if !p.End.IsZero() && s.Next.After(p.End) {
		fail("Next after End")
	}
	if p.Repeat >= 0 && st.Runs+st.Skipped+s.Skipped >= max(p.Repeat, 1) {
		fail("Next beyond the last allowed planned time")
	}
	if !s.Next.Truncate(time.Millisecond).Equal(s.Next) {
		fail("Next not a whole millisecond")
	}
}
