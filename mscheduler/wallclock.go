package mscheduler

import "time"

// Wall-clock plans are computed on "wall times": a local date and time in
// the plan's zone, held in a time.Time in UTC so that arithmetic on it
// ignores DST. A wall time becomes an instant through instantOf, which
// decides the two DST cases explicitly (time.Date leaves them unspecified).

// wallOf is the wall time of instant t in loc.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instantOf is the instant at which the clocks of loc show wall time w. A
// wall time shown twice (clocks set back) gives the first instant; one never
// shown (clocks set forward over it) gives the first instant after the gap.
func instantOf(w time.Time, loc *time.Location) time.Time {
	if loc == time.UTC {
		return w
	}
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	start, end := guess.ZoneBounds()
	// The instant lies in the zone period of the guess or a neighbour.
	periods := []time.Time{guess}
	if !start.IsZero() {
		periods = append(periods, start.Add(-time.Nanosecond))
	}
	if !end.IsZero() {
		periods = append(periods, end)
	}
	var best time.Time
	for _, at := range periods {
		_, offset := at.Zone()
		i := w.Add(-time.Duration(offset) * time.Second)
		s, e := at.ZoneBounds()
		if (s.IsZero() || !i.Before(s)) && (e.IsZero() || i.Before(e)) && (best.IsZero() || i.Before(best)) {
			best = i
		}
	}
	if !best.IsZero() {
		return best.UTC()
	}
	// In a gap: the transition where the wall clock jumps over w.
	for _, t := range []time.Time{start, end} {
		if !t.IsZero() && wallOf(t.Add(-time.Nanosecond), loc).Before(w) && !wallOf(t, loc).Before(w) {
			return t.UTC()
		}
	}
	return guess.UTC() // not reached for real zone data
}

// lastDayOfMonth is the number of days in the month of year.
func lastDayOfMonth(year int, month time.Month) int {
	return time.Date(year, month+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// monthDay resolves a monthly plan's day in one month: 1..31 clamps to the
// last day, 0 is the last day, -n is n days before the last, not before
// the 1st.
func monthDay(day, year int, month time.Month) int {
	last := lastDayOfMonth(year, month)
	switch {
	case day > 0:
		return min(day, last)
	case day == 0:
		return last
	default:
		return max(last+day, 1)
	}
}

func atTime(date time.Time, t TimeOfDay) time.Time {
	return time.Date(date.Year(), date.Month(), date.Day(), t.Hour, t.Minute, t.Second, 0, time.UTC)
}
