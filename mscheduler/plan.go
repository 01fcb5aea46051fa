package mscheduler

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// PlanKind says how a plan lays out its planned times.
type PlanKind string

const (
	// PlanOnce runs once, at Plan.At.
	PlanOnce PlanKind = "once"
	// PlanEvery runs every Plan.Every Plan.Unit, counted from Plan.Start.
	PlanEvery PlanKind = "every"
	// PlanWeekly runs on Plan.Weekday at Plan.Time, in Plan.Zone.
	PlanWeekly PlanKind = "weekly"
	// PlanMonthly runs on Plan.Day of each month at Plan.Time, in Plan.Zone.
	PlanMonthly PlanKind = "monthly"
	// PlanCron runs at the times of the cron expression Plan.Cron, read as
	// wall-clock times in Plan.Zone.
	PlanCron PlanKind = "cron"
)

// Unit is the unit of a [PlanEvery] plan.
type Unit string

const (
	Second Unit = "second"
	Minute Unit = "minute"
	Hour   Unit = "hour"
	// Day is a calendar day in the plan's zone: across a DST change the
	// planned time keeps its wall-clock time, so the gap is 23 or 25 hours.
	Day Unit = "day"
)

// MissedPolicy says what happens to planned times that passed without a run
// starting: the workers were down, the task was waiting behind a long run,
// or (when Plan.Overrun is empty) a run overran them.
type MissedPolicy string

const (
	// MissedSkip jumps to the first planned time after now and counts the
	// planned times it passed as skipped. The latest planned time that has
	// come is not missed if it is at most Plan.Grace late: it runs, and only
	// the earlier ones are skipped. If no planned time is left, the plan
	// finishes without running.
	MissedSkip MissedPolicy = "skip"
	// MissedCatchUp runs every missed planned time, one after another, each
	// after the previous one has finished.
	MissedCatchUp MissedPolicy = "catch_up"
	// MissedRunOnce runs once now for all the missed planned times, as the
	// latest of them, then continues on the plan's grid: after planned time
	// last, at now, the next is the latest planned time at or before now
	// (last + floor((now-last)/interval) × interval for a fixed interval).
	MissedRunOnce MissedPolicy = "run_once"
)

// OverrunPolicy says what happens to planned times that come while a run of
// the task is still going. Such a planned time is never started alongside
// the run.
type OverrunPolicy string

const (
	// OverrunAsMissed (the zero value) treats them as missed runs: under
	// the default [MissedSkip] they are skipped and counted.
	OverrunAsMissed OverrunPolicy = ""
	// OverrunSkip skips and counts them whatever the missed-run policy.
	OverrunSkip OverrunPolicy = "skip"
	// OverrunQueue runs them after the run ends, one after another, whatever
	// the missed-run policy. If the run itself started late, the planned
	// times before its start were missed: the late run stood for them, and
	// they are skipped (unless the missed-run policy is [MissedCatchUp]).
	OverrunQueue OverrunPolicy = "queue"
)

// Plan limits and defaults.
const (
	// RepeatForever is the Repeat of a plan that never runs out.
	RepeatForever = -1
	// EveryMax is the largest Plan.Every.
	EveryMax = 32766
	// GraceDefault is how late a planned time may start and still count as
	// on time under [MissedSkip].
	GraceDefault = 5 * time.Second
)

// TimeOfDay is a wall-clock time in a plan's zone.
type TimeOfDay struct {
	Hour, Minute, Second int
}

func (t TimeOfDay) String() string {
	return fmt.Sprintf("%02d:%02d:%02d", t.Hour, t.Minute, t.Second)
}

func (t TimeOfDay) valid() bool {
	return t.Hour >= 0 && t.Hour < 24 && t.Minute >= 0 && t.Minute < 60 && t.Second >= 0 && t.Second < 60
}

// parseTimeOfDay reads "15:04:05" or "15:04".
func parseTimeOfDay(s string) (TimeOfDay, error) {
	var t TimeOfDay
	var n int
	var err error
	if strings.Count(s, ":") == 1 {
		n, err = fmt.Sscanf(s, "%d:%d", &t.Hour, &t.Minute)
		n++
	} else {
		n, err = fmt.Sscanf(s, "%d:%d:%d", &t.Hour, &t.Minute, &t.Second)
	}
	if err != nil || n != 3 || !t.valid() {
		return TimeOfDay{}, fmt.Errorf("must be a time of day as HH:MM or HH:MM:SS, got %q", s)
	}
	return t, nil
}

// Plan makes a task recurring: after each run the task is rescheduled to
// the plan's next planned time, in the same write that records the run. The
// constructors [Once], [Every], [Weekly], [Monthly] and [Cron] fill the
// fields of their kind; the other fields are shared.
//
// The planned times are computed by [Plan.Next], a pure function.
type Plan struct {
	Kind PlanKind

	// At is the planned time of a [PlanOnce] plan.
	At time.Time
	// Every and Unit are the interval of a [PlanEvery] plan: Every from 1
	// to [EveryMax].
	Every int
	Unit  Unit
	// Weekday is the day of a [PlanWeekly] plan.
	Weekday time.Weekday
	// Day is the day of the month of a [PlanMonthly] plan: 1 to 31, where a
	// month without that day uses its last day; 0 for the last day; -1 to
	// -31 for the last day plus Day (-1 is the day before the last), never
	// before the 1st.
	Day int
	// Time is the time of day of a weekly or monthly plan.
	Time TimeOfDay
	// Cron is the expression of a [PlanCron] plan: 5 fields (minute hour
	// day-of-month month day-of-week), 6 with seconds first, or a
	// descriptor such as @daily.
	Cron string

	// Zone is the IANA time zone of wall-clock plans (weekly, monthly, cron,
	// and every N days). A local time that does not exist (skipped by a DST
	// change) runs at the first instant after the gap; one that exists twice
	// runs once, at the first. Defaults to UTC.
	Zone string
	// Repeat is how many planned times the plan has: 0 is one, N > 0 is
	// N, [RepeatForever] never stops. It counts planned times, not runs: a
	// planned time skipped under the missed-run policy (or SkipNext, or a
	// pause) uses up the count too, so a plan whose last planned time has
	// already passed when it would start finishes without running. The
	// constructors of recurring kinds set RepeatForever.
	Repeat int
	// Start and End bound the planned times, both included: nothing runs
	// outside them, and after End the plan is finished. An every plan
	// counts its intervals from Start. Start defaults to when the server
	// receives the task; End to never.
	Start, End time.Time
	// Missed defaults to [MissedSkip].
	Missed MissedPolicy
	// Overrun defaults to [OverrunAsMissed].
	Overrun OverrunPolicy
	// Grace is how late a planned time may start and still count as on time
	// under [MissedSkip]. Defaults to [GraceDefault].
	Grace time.Duration
}

// Once returns a plan that runs once, at at.
func Once(at time.Time) Plan { return Plan{Kind: PlanOnce, At: at} }

// Every returns a plan that runs every n units, forever, counted from when
// the server receives the task (set Start to count from another time).
func Every(n int, unit Unit) Plan {
	return Plan{Kind: PlanEvery, Every: n, Unit: unit, Repeat: RepeatForever}
}

// Weekly returns a plan that runs every week on day at hour:minute, forever.
func Weekly(day time.Weekday, hour, minute int) Plan {
	return Plan{Kind: PlanWeekly, Weekday: day, Time: TimeOfDay{Hour: hour, Minute: minute}, Repeat: RepeatForever}
}

// Monthly returns a plan that runs every month on day (see Plan.Day) at
// hour:minute, forever.
func Monthly(day, hour, minute int) Plan {
	return Plan{Kind: PlanMonthly, Day: day, Time: TimeOfDay{Hour: hour, Minute: minute}, Repeat: RepeatForever}
}

// Cron returns a plan that runs at the times of expr, forever.
func Cron(expr string) Plan { return Plan{Kind: PlanCron, Cron: expr, Repeat: RepeatForever} }

// Validate reports the first invalid field as an *InvalidError named
// Plan.Field.
func (p Plan) Validate() error {
	_, err := p.compile("Plan.")
	return err
}

// PlanState is where a plan stands, as kept on its task.
type PlanState struct {
	// Last is the planned time of the last run; zero before the first run,
	// when the first planned time is at or after Start.
	Last time.Time
	// Runs is the number of runs so far.
	Runs int
	// Skipped is the number of planned times skipped so far. Runs +
	// Skipped is the number of planned times used up, which Repeat bounds.
	Skipped int
	// Started is when the run of Last started, zero if it is not known.
	// Planned times at or after it came while that run was going, and
	// follow Plan.Overrun.
	Started time.Time
	// SkipNext is the number of coming planned times to skip.
	SkipNext int
}

// Step is the outcome of [Plan.Next].
type Step struct {
	// Next is the next planned time; zero when Done.
	Next time.Time
	// Skipped is the number of planned times passed over to reach Next (or
	// the end of the plan).
	Skipped int
	// Done says the plan has no planned time left: it is finished.
	Done bool
}

// Next returns the planned time that follows st, at now, under the plan's
// policies. It does no I/O and reads no clock: now is the caller's. The
// next planned time is after st.Last, at or after Start, at or before End,
// and never earlier for a later now.
func (p Plan) Next(st PlanState, now time.Time) (Step, error) {
	s, err := p.compile("Plan.")
	if err != nil {
		return Step{}, err
	}
	return s.next(st, now.Truncate(time.Millisecond)), nil
}

// Upcoming returns the next n planned times after st at now, as the
// workers run them when each runs on time: the first is Next(st,
// now).Next, and each following one is the planned time that follows the
// one before. It returns fewer than n when the plan ends first.
func (p Plan) Upcoming(st PlanState, now time.Time, n int) ([]time.Time, error) {
	s, err := p.compile("Plan.")
	if err != nil {
		return nil, err
	}
	now = now.Truncate(time.Millisecond)
	return s.upcoming(s.next(st, now), st, n), nil
}

// Planned times stay within these years, so that no span between two of
// them overflows a time.Duration.
var (
	planTimeMin = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	planTimeMax = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// cronParser reads 5-field and 6-field (seconds first) expressions and
// descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// zones caches loaded locations: time.LoadLocation reads the zone database
// on every call.
var zones sync.Map // name -> *time.Location

func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("must name a zone, not Local: workers may be in different zones")
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// compile validates the plan and prepares its computations. Times are
// truncated to the millisecond, as stored.
func (p Plan) compile(prefix string) (*schedule, error) {
	bad := func(field, format string, args ...any) (*schedule, error) {
		return nil, invalid(prefix+field, format, args...)
	}
	s := &schedule{kind: p.Kind, every: p.Every, unit: p.Unit, weekday: p.Weekday, day: p.Day, tod: p.Time,
		start: p.Start.Truncate(time.Millisecond), end: p.End.Truncate(time.Millisecond),
		missed: p.Missed, overrun: p.Overrun, grace: p.Grace}
	loc, err := loadZone(p.Zone)
	if err != nil {
		return bad("Zone", "%v", err)
	}
	s.loc = loc
	if err := p.checkKindFields(prefix); err != nil {
		return nil, err
	}
	switch p.Kind {
	case PlanOnce:
		if p.At.IsZero() {
			return bad("At", "must be set for a once plan")
		}
		if p.Repeat != 0 && p.Repeat != 1 {
			return bad("Repeat", "must be 0 or 1 for a once plan, got %d", p.Repeat)
		}
		s.at = p.At.Truncate(time.Millisecond)
	case PlanEvery:
		if p.Every < 1 || p.Every > EveryMax {
			return bad("Every", "must be from 1 to %d, got %d", EveryMax, p.Every)
		}
		step, ok := map[Unit]time.Duration{Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 0}[p.Unit]
		if !ok {
			return bad("Unit", "must be second, minute, hour or day, got %q", p.Unit)
		}
		s.interval = time.Duration(p.Every) * step
	case PlanWeekly:
		if p.Weekday < time.Sunday || p.Weekday > time.Saturday {
			return bad("Weekday", "must be from 0 (Sunday) to 6, got %d", p.Weekday)
		}
	case PlanMonthly:
		if p.Day < -31 || p.Day > 31 {
			return bad("Day", "must be from -31 to 31, got %d", p.Day)
		}
	case PlanCron:
		sched, err := parseCron(p.Cron)
		if err != nil {
			return bad("Cron", "%v", err)
		}
		s.cron = sched
	case "":
		return bad("Kind", "must be set (once, every, weekly, monthly or cron)")
	default:
		return bad("Kind", "must be once, every, weekly, monthly or cron, got %q", p.Kind)
	}
	if (p.Kind == PlanWeekly || p.Kind == PlanMonthly) && !p.Time.valid() {
		return bad("Time", "must be a time of day from 00:00:00 to 23:59:59, got %s", p.Time)
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"At", p.At}, {"Start", p.Start}, {"End", p.End}} {
		if !f.t.IsZero() && (f.t.Before(planTimeMin) || !f.t.Before(planTimeMax)) {
			return bad(f.name, "must be from %d to %d, got %s", planTimeMin.Year(), planTimeMax.Year()-1, f.t.UTC().Format(time.RFC3339))
		}
	}
	switch {
	case p.Repeat < RepeatForever:
		return bad("Repeat", "must be -1 (forever) or more, got %d", p.Repeat)
	case !s.start.IsZero() && !s.end.IsZero() && s.end.Before(s.start):
		return bad("End", "must not be before Start (%s), got %s", s.start.UTC().Format(time.RFC3339), s.end.UTC().Format(time.RFC3339))
	case p.Grace < 0:
		return bad("Grace", "must not be negative, got %s", p.Grace)
	}
	switch p.Missed {
	case "":
		s.missed = MissedSkip
	case MissedSkip, MissedCatchUp, MissedRunOnce:
	default:
		return bad("Missed", "must be skip, catch_up or run_once, got %q", p.Missed)
	}
	switch p.Overrun {
	case OverrunAsMissed, OverrunSkip, OverrunQueue:
	default:
		return bad("Overrun", "must be empty (as missed), skip or queue, got %q", p.Overrun)
	}
	if s.grace == 0 {
		s.grace = GraceDefault
	}
	s.limit = p.Repeat
	if p.Repeat == 0 {
		s.limit = 1
	}
	return s, nil
}

// checkKindFields refuses a field that belongs to another kind, which is
// almost always a mistake (a Cron string on an every plan, say).
func (p Plan) checkKindFields(prefix string) error {
	set := []struct {
		field string
		isSet bool
		kinds []PlanKind
	}{
		{"At", !p.At.IsZero(), []PlanKind{PlanOnce}},
		{"Every", p.Every != 0, []PlanKind{PlanEvery}},
		{"Unit", p.Unit != "", []PlanKind{PlanEvery}},
		{"Weekday", p.Weekday != 0, []PlanKind{PlanWeekly}},
		{"Day", p.Day != 0, []PlanKind{PlanMonthly}},
		{"Time", p.Time != TimeOfDay{}, []PlanKind{PlanWeekly, PlanMonthly}},
		{"Cron", p.Cron != "", []PlanKind{PlanCron}},
	}
	for _, f := range set {
		if !f.isSet {
			continue
		}
		ok := false
		for _, k := range f.kinds {
			ok = ok || k == p.Kind
		}
		if !ok && p.Kind != "" {
			return invalid(prefix+f.field, "is not used by a %s plan", p.Kind)
		}
	}
	return nil
}

func parseCron(expr string) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, fmt.Errorf("must be set for a cron plan")
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("@every is not a wall-clock time: use an every plan, got %q", expr)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("must not name a zone: set Plan.Zone, got %q", expr)
	}
	if !strings.HasPrefix(expr, "@") {
		if n := len(strings.Fields(expr)); n != 5 && n != 6 {
			return nil, fmt.Errorf("must have 5 or 6 fields, got %d in %q", n, expr)
		}
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cannot be parsed: %v", err)
	}
	// The parser looks 5 years ahead; from a leap year that finds any date
	// that exists at all (a February 30 never does).
	if sched.Next(time.Date(2023, 12, 31, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("never matches a date, got %q", expr)
	}
	return sched, nil
}
