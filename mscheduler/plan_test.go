package mscheduler_test

import (
	"errors"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // zones without system data

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Expected values in these tests are computed by hand from the documented
// behaviour of plans, never by calling the code under test. Instants are
// written in UTC; a comment gives the wall-clock time where a zone matters.
// DST transitions used (tz database):
//
//	America/New_York 2026-03-08 07:00 UTC: 02:00 EST -> 03:00 EDT
//	America/New_York 2026-11-01 06:00 UTC: 02:00 EDT -> 01:00 EST
//	Europe/Berlin    2026-03-29 01:00 UTC: 02:00 CET -> 03:00 CEST
//	Europe/Berlin    2026-10-25 01:00 UTC: 03:00 CEST -> 02:00 CET

const (
	newYork  = "America/New_York"
	berlin   = "Europe/Berlin"
	lordHowe = "Australia/Lord_Howe"
)

// ts parses "2006-01-02 15:04:05[.000]" as UTC.
func ts(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		panic(err)
	}
	return t
}

// planOpt adjusts a plan built by a constructor.
type planOpt func(*mscheduler.Plan)

func with(p mscheduler.Plan, opts ...planOpt) mscheduler.Plan {
	for _, o := range opts {
		o(&p)
	}
	return p
}

func start(t time.Time) planOpt     { return func(p *mscheduler.Plan) { p.Start = t } }
func end(t time.Time) planOpt       { return func(p *mscheduler.Plan) { p.End = t } }
func zone(z string) planOpt         { return func(p *mscheduler.Plan) { p.Zone = z } }
func repeat(n int) planOpt          { return func(p *mscheduler.Plan) { p.Repeat = n } }
func grace(d time.Duration) planOpt { return func(p *mscheduler.Plan) { p.Grace = d } }
func missed(m mscheduler.MissedPolicy) planOpt {
	return func(p *mscheduler.Plan) { p.Missed = m }
}
func overrun(o mscheduler.OverrunPolicy) planOpt {
	return func(p *mscheduler.Plan) { p.Overrun = o }
}

// ran is the state after runs runs, the last planned at last.
func ran(last time.Time, runs int) mscheduler.PlanState {
	return mscheduler.PlanState{Last: last, Runs: runs}
}

func next(t time.Time, skipped int) mscheduler.Step {
	return mscheduler.Step{Next: t, Skipped: skipped}
}

func done(skipped int) mscheduler.Step {
	return mscheduler.Step{Skipped: skipped, Done: true}
}

type nextCase struct {
	name string
	plan mscheduler.Plan
	st   mscheduler.PlanState
	now  time.Time
	want mscheduler.Step
}

func fmtTime(t time.Time, zoneName string) string {
	if t.IsZero() {
		return "zero"
	}
	s := t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	if zoneName != "" && zoneName != "UTC" {
		if loc, err := time.LoadLocation(zoneName); err == nil {
			s += " (" + t.In(loc).Format("2006-01-02 15:04:05.000 MST") + ")"
		}
	}
	return s
}

func fmtStep(s mscheduler.Step, zoneName string) string {
	if s.Done {
		return "Done, skipped " + itoa(s.Skipped) + ", next " + fmtTime(s.Next, zoneName)
	}
	return "next " + fmtTime(s.Next, zoneName) + ", skipped " + itoa(s.Skipped)
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func runNextCases(t *testing.T, cases []nextCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.plan.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got, err := c.plan.Next(c.st, c.now)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if got.Done != c.want.Done || got.Skipped != c.want.Skipped || !got.Next.Equal(c.want.Next) {
				t.Errorf("Next(Last %s, Runs %d, SkipNext %d, Started %s; now %s)\n got: %s\nwant: %s",
					fmtTime(c.st.Last, c.plan.Zone), c.st.Runs, c.st.SkipNext, fmtTime(c.st.Started, c.plan.Zone),
					fmtTime(c.now, c.plan.Zone), fmtStep(got, c.plan.Zone), fmtStep(c.want, c.plan.Zone))
			}
		})
	}
}

func TestPlanNextSpecExamples(t *testing.T) {
	d := "2026-01-05 "
	every3 := with(mscheduler.Every(3, mscheduler.Minute), start(ts(d+"10:00:00")))
	every2 := with(mscheduler.Every(2, mscheduler.Minute), start(ts(d+"00:00:00")))
	// A run planned at 0:00 started at 0:00 and ends now, at 0:06:00.050.
	overran := mscheduler.PlanState{Last: ts(d + "00:00:00"), Runs: 1, Started: ts(d + "00:00:00")}
	endOfRun := ts(d + "00:06:00.050")
	runNextCases(t, []nextCase{
		{"skip jumps past now and counts 10:03 10:06 10:09",
			every3, ran(ts(d+"10:00:00"), 1), ts(d + "10:10:00"), next(ts(d+"10:12:00"), 3)},
		{"run once runs the latest missed 10:09",
			with(every3, missed(mscheduler.MissedRunOnce)), ran(ts(d+"10:00:00"), 1), ts(d + "10:10:00"), next(ts(d+"10:09:00"), 2)},
		{"run once then realigns on 10:12",
			with(every3, missed(mscheduler.MissedRunOnce)), ran(ts(d+"10:09:00"), 2), ts(d + "10:10:00"), next(ts(d+"10:12:00"), 0)},
		{"catch up runs 10:03 first",
			with(every3, missed(mscheduler.MissedCatchUp)), ran(ts(d+"10:00:00"), 1), ts(d + "10:10:00"), next(ts(d+"10:03:00"), 0)},
		{"catch up then runs 10:06",
			with(every3, missed(mscheduler.MissedCatchUp)), ran(ts(d+"10:03:00"), 2), ts(d + "10:10:00"), next(ts(d+"10:06:00"), 0)},

		{"overrun default policies run 0:06 and skip 0:02 0:04",
			every2, overran, endOfRun, next(ts(d+"00:06:00"), 2)},
		{"overrun queue runs 0:02",
			with(every2, overrun(mscheduler.OverrunQueue)), overran, endOfRun, next(ts(d+"00:02:00"), 0)},
		{"overrun skip wins over catch up",
			with(every2, missed(mscheduler.MissedCatchUp), overrun(mscheduler.OverrunSkip)), overran, endOfRun, next(ts(d+"00:06:00"), 2)},
		{"overrun as missed under catch up runs 0:02",
			with(every2, missed(mscheduler.MissedCatchUp)), overran, endOfRun, next(ts(d+"00:02:00"), 0)},
		{"overrun as missed under run once runs 0:06",
			with(every2, missed(mscheduler.MissedRunOnce)), overran, endOfRun, next(ts(d+"00:06:00"), 2)},
		// The run of 0:00 started late, at 0:03: 0:02 passed before it
		// started (missed: skipped), 0:04 and 0:06 came while it was going
		// (overrun: queued).
		{"overrun queue after a late start queues the times from the start on",
			with(every2, overrun(mscheduler.OverrunQueue)),
			mscheduler.PlanState{Last: ts(d + "00:00:00"), Runs: 1, Started: ts(d + "00:03:00")}, endOfRun, next(ts(d+"00:04:00"), 1)},
		{"overrun skip after a late start catches up the missed time before the start",
			with(every2, missed(mscheduler.MissedCatchUp), overrun(mscheduler.OverrunSkip)),
			mscheduler.PlanState{Last: ts(d + "00:00:00"), Runs: 1, Started: ts(d + "00:03:00")}, endOfRun, next(ts(d+"00:02:00"), 0)},
		{"overrun queue without a known start follows the missed policy",
			with(every2, overrun(mscheduler.OverrunQueue)), ran(ts(d+"00:00:00"), 1), endOfRun, next(ts(d+"00:06:00"), 2)},
	})
}

func TestPlanNextGrace(t *testing.T) {
	d := "2026-01-05 "
	minutely := with(mscheduler.Every(1, mscheduler.Minute), start(ts(d+"10:00:00")))
	last := ran(ts(d+"10:00:00"), 1)
	runNextCases(t, []nextCase{
		{"exactly grace late runs",
			minutely, last, ts(d + "10:01:05"), next(ts(d+"10:01:00"), 0)},
		{"a millisecond more than grace late is skipped",
			minutely, last, ts(d + "10:01:05.001"), next(ts(d+"10:02:00"), 1)},
		{"latest missed within grace runs",
			minutely, last, ts(d + "10:05:03"), next(ts(d+"10:05:00"), 4)},
		{"latest missed beyond grace is skipped",
			minutely, last, ts(d + "10:05:06"), next(ts(d+"10:06:00"), 5)},
		{"first planned time within grace runs",
			minutely, mscheduler.PlanState{}, ts(d + "10:00:03"), next(ts(d+"10:00:00"), 0)},
		{"first planned time beyond grace is skipped",
			minutely, mscheduler.PlanState{}, ts(d + "10:00:06"), next(ts(d+"10:01:00"), 1)},
		{"custom grace: at most 30s late runs",
			with(minutely, grace(30*time.Second)), last, ts(d + "10:01:30"), next(ts(d+"10:01:00"), 0)},
		{"custom grace: more than 30s late is skipped",
			with(minutely, grace(30*time.Second)), last, ts(d + "10:01:30.001"), next(ts(d+"10:02:00"), 1)},
		{"grace does not apply to catch up",
			with(minutely, missed(mscheduler.MissedCatchUp)), last, ts(d + "10:01:30"), next(ts(d+"10:01:00"), 0)},
	})
}

func TestPlanNextOnce(t *testing.T) {
	at := ts("2026-06-01 12:00:00")
	once := mscheduler.Once(at)
	runNextCases(t, []nextCase{
		{"at in the future", once, mscheduler.PlanState{}, ts("2026-06-01 11:00:00"), next(at, 0)},
		{"at now", once, mscheduler.PlanState{}, at, next(at, 0)},
		{"at within grace", once, mscheduler.PlanState{}, ts("2026-06-01 12:00:04"), next(at, 0)},
		{"at an hour past under skip finishes without running",
			once, mscheduler.PlanState{}, ts("2026-06-01 13:00:00"), done(1)},
		{"at an hour past under catch up runs now",
			with(once, missed(mscheduler.MissedCatchUp)), mscheduler.PlanState{}, ts("2026-06-01 13:00:00"), next(at, 0)},
		{"at an hour past under run once runs now",
			with(once, missed(mscheduler.MissedRunOnce)), mscheduler.PlanState{}, ts("2026-06-01 13:00:00"), next(at, 0)},
		{"after its run it is done", once, ran(at, 1), ts("2026-06-01 12:00:01"), done(0)},
		{"after its run it is done under catch up",
			with(once, missed(mscheduler.MissedCatchUp)), ran(at, 1), ts("2026-06-01 13:00:00"), done(0)},
		{"at before start never runs",
			with(once, start(ts("2026-06-01 12:30:00"))), mscheduler.PlanState{}, ts("2026-06-01 11:00:00"), done(0)},
	})
}

func TestPlanNextMonthly(t *testing.T) {
	monthly := func(day int) mscheduler.Plan { return mscheduler.Monthly(day, 9, 0) }
	// after is the state after a run planned at last, a minute later.
	type c = nextCase
	after := func(name string, p mscheduler.Plan, last, want string) c {
		l := ts(last + " 09:00:00")
		return c{name, p, ran(l, 1), l.Add(time.Minute), next(ts(want+" 09:00:00"), 0)}
	}
	runNextCases(t, []nextCase{
		after("day 31 in February 2026 is the 28th", monthly(31), "2026-01-31", "2026-02-28"),
		after("day 31 in February 2028 is the 29th", monthly(31), "2028-01-31", "2028-02-29"),
		after("day 31 after February 2026 is March 31", monthly(31), "2026-02-28", "2026-03-31"),
		after("day 31 after February 2028 is March 31", monthly(31), "2028-02-29", "2028-03-31"),
		after("day 31 in April is the 30th", monthly(31), "2026-03-31", "2026-04-30"),
		after("day 30 in February 2026 is the 28th", monthly(30), "2026-01-30", "2026-02-28"),
		after("day 30 in February 2028 is the 29th", monthly(30), "2028-01-30", "2028-02-29"),
		after("day 30 after February is March 30", monthly(30), "2026-02-28", "2026-03-30"),
		after("day 0 in February 2026", monthly(0), "2026-01-31", "2026-02-28"),
		after("day 0 in February 2028", monthly(0), "2028-01-31", "2028-02-29"),
		after("day 0 in March", monthly(0), "2026-02-28", "2026-03-31"),
		after("day 0 in April", monthly(0), "2026-03-31", "2026-04-30"),
		after("day -1 in February 2026", monthly(-1), "2026-01-30", "2026-02-27"),
		after("day -1 in February 2028", monthly(-1), "2028-01-30", "2028-02-28"),
		after("day -1 in April", monthly(-1), "2026-03-30", "2026-04-29"),
		after("day -31 in March is the 1st", monthly(-31), "2026-02-01", "2026-03-01"),
		after("day -31 in April is the 1st", monthly(-31), "2026-03-01", "2026-04-01"),
		{"day -31 first run is February 1st", monthly(-31), mscheduler.PlanState{}, ts("2026-01-15 00:00:00"), next(ts("2026-02-01 09:00:00"), 0)},
		{"day 15 later today", monthly(15), mscheduler.PlanState{}, ts("2026-01-15 08:00:00"), next(ts("2026-01-15 09:00:00"), 0)},
		{"day 15 passed today", monthly(15), mscheduler.PlanState{}, ts("2026-01-15 10:00:00"), next(ts("2026-02-15 09:00:00"), 0)},
		{"monthly in a zone", with(monthly(1), zone(berlin)), mscheduler.PlanState{}, ts("2026-06-15 00:00:00"),
			next(ts("2026-07-01 07:00:00"), 0)}, // 09:00 CEST
	})
}

func TestPlanNextWeekly(t *testing.T) {
	sunday9 := mscheduler.Weekly(time.Sunday, 9, 0)
	runNextCases(t, []nextCase{
		{"from Saturday to Sunday", sunday9, mscheduler.PlanState{}, ts("2026-03-14 10:00:00"), next(ts("2026-03-15 09:00:00"), 0)},
		{"from Sunday to the next Sunday", sunday9, ran(ts("2026-03-15 09:00:00"), 1), ts("2026-03-15 09:00:01"),
			next(ts("2026-03-22 09:00:00"), 0)},
		{"Saturday from Sunday", mscheduler.Weekly(time.Saturday, 9, 0), mscheduler.PlanState{}, ts("2026-03-15 10:00:00"),
			next(ts("2026-03-21 09:00:00"), 0)},
		{"same day, time passed: next week", mscheduler.Weekly(time.Wednesday, 9, 0), mscheduler.PlanState{}, ts("2026-03-18 10:00:00"),
			next(ts("2026-03-25 09:00:00"), 0)},
		{"same day, time to come: today", mscheduler.Weekly(time.Wednesday, 9, 0), mscheduler.PlanState{}, ts("2026-03-18 08:00:00"),
			next(ts("2026-03-18 09:00:00"), 0)},
		{"weekly in a zone", with(mscheduler.Weekly(time.Monday, 9, 0), zone(berlin)), mscheduler.PlanState{}, ts("2026-03-15 12:00:00"),
			next(ts("2026-03-16 08:00:00"), 0)}, // 09:00 CET
		{"weekly with seconds", with(mscheduler.Weekly(time.Monday, 9, 0), func(p *mscheduler.Plan) { p.Time.Second = 30 }),
			mscheduler.PlanState{}, ts("2026-03-16 09:00:10"), next(ts("2026-03-16 09:00:30"), 0)},
	})
}

func TestPlanNextDST(t *testing.T) {
	cronNY := with(mscheduler.Cron("30 2 * * *"), zone(newYork))
	cronBerlin := with(mscheduler.Cron("30 2 * * *"), zone(berlin))
	dailyNY := with(mscheduler.Every(1, mscheduler.Day), zone(newYork), start(ts("2026-03-07 07:30:00")))        // 02:30 EST
	dailyBerlin := with(mscheduler.Every(1, mscheduler.Day), zone(berlin), start(ts("2026-03-28 01:30:00")))     // 02:30 CET
	cron130NY := with(mscheduler.Cron("30 1 * * *"), zone(newYork))                                              // fall back
	daily130NY := with(mscheduler.Every(1, mscheduler.Day), zone(newYork), start(ts("2026-10-31 05:30:00")))     // 01:30 EDT
	dailyBerlinFall := with(mscheduler.Every(1, mscheduler.Day), zone(berlin), start(ts("2026-10-24 00:30:00"))) // 02:30 CEST
	hourlyNY := with(mscheduler.Cron("0 * * * *"), zone(newYork))
	hourlyBerlin := with(mscheduler.Cron("0 * * * *"), zone(berlin))
	// after is the state after a run planned at last, checked a minute later.
	after := func(name string, p mscheduler.Plan, last, want string) nextCase {
		l := ts(last)
		return nextCase{name, p, ran(l, 1), l.Add(time.Minute), next(ts(want), 0)}
	}
	runNextCases(t, []nextCase{
		// Spring forward: 02:30 does not exist; it runs at 03:00, the first
		// instant after the gap, and at 02:30 the next day.
		after("NY cron 02:30 on the spring-forward day runs at 03:00 EDT", cronNY, "2026-03-07 07:30:00", "2026-03-08 07:00:00"),
		after("NY cron 02:30 the day after spring forward", cronNY, "2026-03-08 07:00:00", "2026-03-09 06:30:00"),
		{"NY cron 02:30 first run on the spring-forward day", cronNY, mscheduler.PlanState{}, ts("2026-03-08 05:00:00"),
			next(ts("2026-03-08 07:00:00"), 0)},
		after("NY every day from 02:30 on the spring-forward day", dailyNY, "2026-03-07 07:30:00", "2026-03-08 07:00:00"),
		after("NY every day from 02:30 the day after spring forward", dailyNY, "2026-03-08 07:00:00", "2026-03-09 06:30:00"),
		after("Berlin cron 02:30 on the spring-forward day runs at 03:00 CEST", cronBerlin, "2026-03-28 01:30:00", "2026-03-29 01:00:00"),
		after("Berlin cron 02:30 the day after spring forward", cronBerlin, "2026-03-29 01:00:00", "2026-03-30 00:30:00"),
		after("Berlin every day from 02:30 on the spring-forward day", dailyBerlin, "2026-03-28 01:30:00", "2026-03-29 01:00:00"),
		after("Berlin every day from 02:30 the day after spring forward", dailyBerlin, "2026-03-29 01:00:00", "2026-03-30 00:30:00"),

		{"NY cron 02:30 run once over the gap day", with(cronNY, missed(mscheduler.MissedRunOnce)),
			ran(ts("2026-03-07 07:30:00"), 1), ts("2026-03-09 12:00:00"), next(ts("2026-03-09 06:30:00"), 1)},
		{"NY cron 02:30 skip over the gap day", cronNY,
			ran(ts("2026-03-07 07:30:00"), 1), ts("2026-03-09 12:00:00"), next(ts("2026-03-10 06:30:00"), 2)},
		{"NY cron 02:30 catch up runs the gap day at 03:00", with(cronNY, missed(mscheduler.MissedCatchUp)),
			ran(ts("2026-03-07 07:30:00"), 1), ts("2026-03-09 12:00:00"), next(ts("2026-03-08 07:00:00"), 0)},
		{"NY cron 02:30 on the gap day within end", with(cronNY, end(ts("2026-03-08 07:00:00"))),
			ran(ts("2026-03-07 07:30:00"), 1), ts("2026-03-07 07:31:00"), next(ts("2026-03-08 07:00:00"), 0)},
		{"NY cron 02:30 on the gap day after end", with(cronNY, end(ts("2026-03-08 06:59:00"))),
			ran(ts("2026-03-07 07:30:00"), 1), ts("2026-03-07 07:31:00"), done(0)},
		// Lord Howe shifts by 30 minutes: 2026-04-05 02:00 +11 -> 01:30
		// +1030 (at 15:00 UTC), 2026-10-04 02:00 +1030 -> 02:30 +11 (at
		// 15:30 UTC).
		after("Lord Howe 01:45 on the fall-back day runs at the first", with(mscheduler.Cron("45 1 * * *"), zone(lordHowe)),
			"2026-04-03 14:45:00", "2026-04-04 14:45:00"),
		after("Lord Howe 01:45 not again at the second", with(mscheduler.Cron("45 1 * * *"), zone(lordHowe)),
			"2026-04-04 14:45:00", "2026-04-05 15:15:00"),
		after("Lord Howe 02:15 on the spring-forward day runs at 02:30", with(mscheduler.Cron("15 2 * * *"), zone(lordHowe)),
			"2026-10-02 15:45:00", "2026-10-03 15:30:00"),
		after("Lord Howe 02:15 the day after spring forward", with(mscheduler.Cron("15 2 * * *"), zone(lordHowe)),
			"2026-10-03 15:30:00", "2026-10-04 15:15:00"),

		// Fall back: the time exists twice; it runs once, at the first.
		after("NY cron 01:30 on the fall-back day runs at 01:30 EDT", cron130NY, "2026-10-31 05:30:00", "2026-11-01 05:30:00"),
		after("NY cron 01:30 not again at 01:30 EST", cron130NY, "2026-11-01 05:30:00", "2026-11-02 06:30:00"),
		{"NY cron 01:30 checked during the second 01:30", cron130NY, ran(ts("2026-11-01 05:30:00"), 1), ts("2026-11-01 06:31:00"),
			next(ts("2026-11-02 06:30:00"), 0)},
		{"NY cron 01:30 first run during the repeated hour is the next day", cron130NY, mscheduler.PlanState{}, ts("2026-11-01 06:00:00"),
			next(ts("2026-11-02 06:30:00"), 0)},
		after("NY every day from 01:30 on the fall-back day", daily130NY, "2026-10-31 05:30:00", "2026-11-01 05:30:00"),
		after("NY every day from 01:30 the day after fall back", daily130NY, "2026-11-01 05:30:00", "2026-11-02 06:30:00"),
		// An every-day plan counts from Start, which is included, even when
		// Start is the second of two instants with the same wall-clock time.
		{"NY every day from a start at the second 01:30 runs at start",
			with(mscheduler.Every(1, mscheduler.Day), zone(newYork), start(ts("2026-11-01 06:30:00"))), // 01:30 EST
			mscheduler.PlanState{}, ts("2026-11-01 06:30:00"), next(ts("2026-11-01 06:30:00"), 0)},
		{"NY every day from a start at the second 01:30, before start",
			with(mscheduler.Every(1, mscheduler.Day), zone(newYork), start(ts("2026-11-01 06:30:00"))),
			mscheduler.PlanState{}, ts("2026-11-01 05:00:00"), next(ts("2026-11-01 06:30:00"), 0)},
		after("NY every day from a start at the second 01:30, the day after",
			with(mscheduler.Every(1, mscheduler.Day), zone(newYork), start(ts("2026-11-01 06:30:00"))),
			"2026-11-01 06:30:00", "2026-11-02 06:30:00"),
		{"Berlin every day from a start at the second 02:30 runs at start",
			with(mscheduler.Every(1, mscheduler.Day), zone(berlin), start(ts("2026-10-25 01:30:00"))), // 02:30 CET
			mscheduler.PlanState{}, ts("2026-10-25 01:30:00"), next(ts("2026-10-25 01:30:00"), 0)},
		after("Berlin cron 02:30 on the fall-back day runs at 02:30 CEST", cronBerlin, "2026-10-24 00:30:00", "2026-10-25 00:30:00"),
		after("Berlin cron 02:30 not again at 02:30 CET", cronBerlin, "2026-10-25 00:30:00", "2026-10-26 01:30:00"),
		after("Berlin every day from 02:30 on the fall-back day", dailyBerlinFall, "2026-10-24 00:30:00", "2026-10-25 00:30:00"),
		after("Berlin every day from 02:30 the day after fall back", dailyBerlinFall, "2026-10-25 00:30:00", "2026-10-26 01:30:00"),

		// Hourly across the changes.
		after("NY hourly 00:00 EDT to 01:00 EDT", hourlyNY, "2026-11-01 04:00:00", "2026-11-01 05:00:00"),
		after("NY hourly does not repeat 01:00 EST", hourlyNY, "2026-11-01 05:00:00", "2026-11-01 07:00:00"),
		{"NY hourly first run during the repeated hour is 02:00 EST", hourlyNY, mscheduler.PlanState{}, ts("2026-11-01 06:10:00"),
			next(ts("2026-11-01 07:00:00"), 0)},
		{"NY hourly skip counts the repeated hour once", hourlyNY, ran(ts("2026-11-01 04:00:00"), 1), ts("2026-11-01 08:00:00.500"),
			next(ts("2026-11-01 08:00:00"), 2)}, // skipped 01:00 EDT, 02:00 EST
		{"NY hourly catch up after the repeated hour", with(hourlyNY, missed(mscheduler.MissedCatchUp)), ran(ts("2026-11-01 05:00:00"), 1), ts("2026-11-01 08:00:00.500"),
			next(ts("2026-11-01 07:00:00"), 0)},
		after("Berlin hourly does not repeat 02:00 CET", hourlyBerlin, "2026-10-25 00:00:00", "2026-10-25 02:00:00"),
		after("NY hourly 01:00 EST to 03:00 EDT over the gap", hourlyNY, "2026-03-08 06:00:00", "2026-03-08 07:00:00"),
		after("NY hourly 03:00 EDT to 04:00 EDT", hourlyNY, "2026-03-08 07:00:00", "2026-03-08 08:00:00"),

		// Weekly and monthly at a time that does not exist.
		{"NY weekly Sunday 02:30 on the spring-forward day", with(mscheduler.Weekly(time.Sunday, 2, 30), zone(newYork)),
			mscheduler.PlanState{}, ts("2026-03-07 17:00:00"), next(ts("2026-03-08 07:00:00"), 0)},
		after("NY weekly Sunday 02:30 the week after", with(mscheduler.Weekly(time.Sunday, 2, 30), zone(newYork)),
			"2026-03-08 07:00:00", "2026-03-15 06:30:00"),
		after("NY weekly Sunday 01:30 on the fall-back day runs at the first", with(mscheduler.Weekly(time.Sunday, 1, 30), zone(newYork)),
			"2026-10-25 05:30:00", "2026-11-01 05:30:00"),
		after("Berlin monthly 29th 02:30 on the spring-forward day", with(mscheduler.Monthly(29, 2, 30), zone(berlin)),
			"2026-02-28 01:30:00", "2026-03-29 01:00:00"),
		after("Berlin monthly 29th 02:30 the month after", with(mscheduler.Monthly(29, 2, 30), zone(berlin)),
			"2026-03-29 01:00:00", "2026-04-29 00:30:00"),
	})
}

func TestPlanNextEvery(t *testing.T) {
	d := "2026-01-05 "
	secs := with(mscheduler.Every(90, mscheduler.Second), start(ts(d+"00:00:00")))
	mins := with(mscheduler.Every(15, mscheduler.Minute), start(ts(d+"10:07:00")))
	hours := with(mscheduler.Every(6, mscheduler.Hour), start(ts(d+"03:00:00")))
	daily := with(mscheduler.Every(1, mscheduler.Day), start(ts(d+"10:00:00")))
	berlinDaily := func(n int, from string) mscheduler.Plan {
		return with(mscheduler.Every(n, mscheduler.Day), zone(berlin), start(ts(from)))
	}
	runNextCases(t, []nextCase{
		{"seconds: start in the future", secs, mscheduler.PlanState{}, ts("2026-01-04 23:00:00"), next(ts(d+"00:00:00"), 0)},
		{"seconds: second interval", secs, ran(ts(d+"00:01:30"), 2), ts(d + "00:01:31"), next(ts(d+"00:03:00"), 0)},
		{"minutes counted from start", mins, ran(ts(d+"10:07:00"), 1), ts(d + "10:08:00"), next(ts(d+"10:22:00"), 0)},
		{"minutes: first planned time missed", mins, mscheduler.PlanState{}, ts(d + "10:20:00"), next(ts(d+"10:22:00"), 1)},
		{"hours counted from start", hours, ran(ts(d+"09:00:00"), 2), ts(d + "09:00:00.500"), next(ts(d+"15:00:00"), 0)},
		{"24 hours are not a calendar day", with(mscheduler.Every(24, mscheduler.Hour), zone(berlin), start(ts("2026-03-28 11:00:00"))),
			ran(ts("2026-03-28 11:00:00"), 1), ts("2026-03-28 11:01:00"), next(ts("2026-03-29 11:00:00"), 0)},
		{"days in UTC", daily, ran(ts(d+"10:00:00"), 1), ts(d + "10:01:00"), next(ts("2026-01-06 10:00:00"), 0)},
		{"days: skip missed days", daily, ran(ts(d+"10:00:00"), 1), ts("2026-01-08 12:00:00"), next(ts("2026-01-09 10:00:00"), 3)},
		{"days across spring forward: 23 hours", berlinDaily(1, "2026-03-28 11:00:00"), // 12:00 CET
			ran(ts("2026-03-28 11:00:00"), 1), ts("2026-03-28 11:01:00"), next(ts("2026-03-29 10:00:00"), 0)}, // 12:00 CEST
		{"days across fall back: 25 hours", berlinDaily(1, "2026-10-24 10:00:00"), // 12:00 CEST
			ran(ts("2026-10-24 10:00:00"), 1), ts("2026-10-24 10:01:00"), next(ts("2026-10-25 11:00:00"), 0)}, // 12:00 CET
		{"two days across spring forward: 47 hours", berlinDaily(2, "2026-03-28 11:00:00"),
			ran(ts("2026-03-28 11:00:00"), 1), ts("2026-03-28 11:01:00"), next(ts("2026-03-30 10:00:00"), 0)},
		{"days keep the wall-clock time after the change", berlinDaily(1, "2026-03-28 11:00:00"),
			ran(ts("2026-03-29 10:00:00"), 2), ts("2026-03-29 10:01:00"), next(ts("2026-03-30 10:00:00"), 0)},
	})
}

func TestPlanNextCron(t *testing.T) {
	runNextCases(t, []nextCase{
		{"5 fields: weekdays 9 to 17 every 15 minutes", mscheduler.Cron("*/15 9-17 * * 1-5"), mscheduler.PlanState{},
			ts("2026-03-13 17:40:00"), next(ts("2026-03-13 17:45:00"), 0)}, // a Friday
		{"5 fields: over the weekend", mscheduler.Cron("*/15 9-17 * * 1-5"), mscheduler.PlanState{},
			ts("2026-03-13 17:50:00"), next(ts("2026-03-16 09:00:00"), 0)},
		{"6 fields: every 10 seconds", mscheduler.Cron("*/10 * * * * *"), ran(ts("2026-03-13 10:00:00"), 1),
			ts("2026-03-13 10:00:00.500"), next(ts("2026-03-13 10:00:10"), 0)},
		{"6 fields: seconds first", mscheduler.Cron("30 15 10 * * *"), mscheduler.PlanState{},
			ts("2026-03-13 11:00:00"), next(ts("2026-03-14 10:15:30"), 0)},
		{"@daily", mscheduler.Cron("@daily"), mscheduler.PlanState{}, ts("2026-03-13 11:00:00"), next(ts("2026-03-14 00:00:00"), 0)},
		{"@weekly", mscheduler.Cron("@weekly"), mscheduler.PlanState{}, ts("2026-03-13 11:00:00"), next(ts("2026-03-15 00:00:00"), 0)},
		{"@daily in New York", with(mscheduler.Cron("@daily"), zone(newYork)), mscheduler.PlanState{},
			ts("2026-03-13 12:00:00"), next(ts("2026-03-14 04:00:00"), 0)}, // 00:00 EDT (after Mar 8)
		{"cron in Berlin before spring forward", with(mscheduler.Cron("0 9 * * *"), zone(berlin)), mscheduler.PlanState{},
			ts("2026-03-27 12:00:00"), next(ts("2026-03-28 08:00:00"), 0)}, // 09:00 CET
		{"cron in Berlin after spring forward", with(mscheduler.Cron("0 9 * * *"), zone(berlin)), mscheduler.PlanState{},
			ts("2026-03-28 12:00:00"), next(ts("2026-03-29 07:00:00"), 0)}, // 09:00 CEST
		{"cron in Lord Howe summer", with(mscheduler.Cron("0 9 * * *"), zone(lordHowe)), mscheduler.PlanState{},
			ts("2026-01-05 00:00:00"), next(ts("2026-01-05 22:00:00"), 0)}, // 09:00 +11 on Jan 6
		{"cron skip counts missed times", mscheduler.Cron("0 * * * *"), ran(ts("2026-03-13 10:00:00"), 1),
			ts("2026-03-13 13:30:00"), next(ts("2026-03-13 14:00:00"), 3)},
		{"cron run once runs the latest missed", with(mscheduler.Cron("0 * * * *"), missed(mscheduler.MissedRunOnce)),
			ran(ts("2026-03-13 10:00:00"), 1), ts("2026-03-13 13:30:00"), next(ts("2026-03-13 13:00:00"), 2)},
	})
}

func TestPlanNextRepeat(t *testing.T) {
	d := "2026-01-05 "
	hourly := with(mscheduler.Every(1, mscheduler.Hour), start(ts(d+"00:00:00")))
	runNextCases(t, []nextCase{
		{"repeat 3 after 2 runs", with(hourly, repeat(3)), ran(ts(d+"01:00:00"), 2), ts(d + "01:00:01"), next(ts(d+"02:00:00"), 0)},
		{"repeat 3 after 3 runs is done", with(hourly, repeat(3)), ran(ts(d+"02:00:00"), 3), ts(d + "02:00:01"), done(0)},
		{"repeat 0 before its run", with(hourly, repeat(0)), mscheduler.PlanState{}, ts("2026-01-04 23:00:00"), next(ts(d+"00:00:00"), 0)},
		{"repeat 0 after 1 run is done", with(hourly, repeat(0)), ran(ts(d+"00:00:00"), 1), ts(d + "00:00:01"), done(0)},
		{"repeat 1 after 1 run is done", with(hourly, repeat(1)), ran(ts(d+"00:00:00"), 1), ts(d + "00:00:01"), done(0)},
		{"repeat forever after a million runs", hourly, ran(ts(d+"00:00:00"), 1_000_000), ts(d + "00:00:01"), next(ts(d+"01:00:00"), 0)},
		{"repeat 3 after 3 runs is done even with missed times", with(hourly, repeat(3), missed(mscheduler.MissedCatchUp)),
			ran(ts(d+"02:00:00"), 3), ts(d + "09:00:00"), done(0)},
	})
}

// Repeat counts planned times: skipped ones use up the count as runs do.
func TestPlanNextRepeatCountsSkippedTimes(t *testing.T) {
	d := "2026-01-05 "
	hourly := with(mscheduler.Every(1, mscheduler.Hour), start(ts(d+"00:00:00")))
	state := func(last time.Time, runs, skipped int) mscheduler.PlanState {
		return mscheduler.PlanState{Last: last, Runs: runs, Skipped: skipped}
	}
	runNextCases(t, []nextCase{
		{"the last allowed planned time already past: finished without running", with(hourly, repeat(3)),
			mscheduler.PlanState{}, ts(d + "05:30:00"), done(3)},
		{"the third planned time within grace runs as the last", with(hourly, repeat(3)),
			mscheduler.PlanState{}, ts(d + "02:00:03"), next(ts(d+"02:00:00"), 2)},
		{"runs and skips below the count go on", with(hourly, repeat(5)),
			state(ts(d+"02:00:00"), 1, 2), ts(d + "02:00:01"), next(ts(d+"03:00:00"), 0)},
		{"skipping through the count finishes, counting only the planned times left", with(hourly, repeat(5)),
			state(ts(d+"02:00:00"), 1, 2), ts(d + "06:30:00"), done(2)},
		{"run once stands for the missed times, which count", with(hourly, repeat(5), missed(mscheduler.MissedRunOnce)),
			state(ts(d+"00:00:00"), 1, 0), ts(d + "03:00:30"), next(ts(d+"03:00:00"), 2)},
		{"run once past the count finishes", with(hourly, repeat(3), missed(mscheduler.MissedRunOnce)),
			state(ts(d+"00:00:00"), 1, 0), ts(d + "05:00:30"), done(2)},
		{"catch up runs up to the count", with(hourly, repeat(3), missed(mscheduler.MissedCatchUp)),
			state(ts(d+"01:00:00"), 2, 0), ts(d + "09:00:00"), next(ts(d+"02:00:00"), 0)},
		{"skip next uses up the count", with(hourly, repeat(3)),
			mscheduler.PlanState{Last: ts(d + "00:00:00"), Runs: 1, SkipNext: 2}, ts(d + "00:00:01"), done(2)},
	})
}

func TestPlanUpcoming(t *testing.T) {
	d := "2026-01-05 "
	hourly := with(mscheduler.Every(1, mscheduler.Hour), start(ts(d+"00:00:00")))
	cases := []struct {
		name string
		plan mscheduler.Plan
		st   mscheduler.PlanState
		now  time.Time
		n    int
		want []time.Time
	}{
		{"the next four", hourly, mscheduler.PlanState{Last: ts(d + "01:00:00"), Runs: 2}, ts(d + "01:30:00"), 4,
			[]time.Time{ts(d + "02:00:00"), ts(d + "03:00:00"), ts(d + "04:00:00"), ts(d + "05:00:00")}},
		{"late: the missed-run policy applies to the first only", hourly, mscheduler.PlanState{Last: ts(d + "01:00:00"), Runs: 2}, ts(d + "03:30:00"), 2,
			[]time.Time{ts(d + "04:00:00"), ts(d + "05:00:00")}},
		{"fewer when Repeat ends the plan", with(hourly, repeat(4)), mscheduler.PlanState{Last: ts(d + "01:00:00"), Runs: 2}, ts(d + "01:30:00"), 5,
			[]time.Time{ts(d + "02:00:00"), ts(d + "03:00:00")}},
		{"none once finished", with(hourly, repeat(2)), mscheduler.PlanState{Last: ts(d + "01:00:00"), Runs: 2}, ts(d + "01:30:00"), 5, nil},
	}
	for _, tc := range cases {
		got, err := tc.plan.Upcoming(tc.st, tc.now, tc.n)
		if err != nil || !slices.EqualFunc(got, tc.want, time.Time.Equal) {
			t.Errorf("%s: Upcoming = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := (mscheduler.Plan{Kind: "hourly"}).Upcoming(mscheduler.PlanState{}, time.Now(), 1); !errors.Is(err, mscheduler.ErrInvalid) {
		t.Errorf("Upcoming of an invalid plan: %v, want ErrInvalid", err)
	}
}

func TestPlanNextWindow(t *testing.T) {
	d := "2026-01-05 "
	window := with(mscheduler.Every(10, mscheduler.Minute), start(ts(d+"10:00:00")), end(ts(d+"11:00:00")))
	runNextCases(t, []nextCase{
		{"start is included", window, mscheduler.PlanState{}, ts(d + "10:00:00"), next(ts(d+"10:00:00"), 0)},
		{"before start waits for start", window, mscheduler.PlanState{}, ts(d + "09:00:00"), next(ts(d+"10:00:00"), 0)},
		{"end is included", window, ran(ts(d+"10:50:00"), 6), ts(d + "10:50:01"), next(ts(d+"11:00:00"), 0)},
		{"end within grace runs", window, ran(ts(d+"10:50:00"), 6), ts(d + "11:00:03"), next(ts(d+"11:00:00"), 0)},
		{"after end is done", window, ran(ts(d+"11:00:00"), 7), ts(d + "11:00:01"), done(0)},
		{"skip past end counts 10:30 to 11:00", window, ran(ts(d+"10:20:00"), 3), ts(d + "12:00:00"), done(4)},
		{"skip past an end off the grid counts 10:30 to 10:50", with(window, end(ts(d+"10:55:00"))),
			ran(ts(d+"10:20:00"), 3), ts(d + "12:00:00"), done(3)},
		{"run once past end runs the last planned time", with(window, missed(mscheduler.MissedRunOnce)),
			ran(ts(d+"10:20:00"), 3), ts(d + "12:00:00"), next(ts(d+"11:00:00"), 3)},
		{"catch up past end runs the next missed", with(window, missed(mscheduler.MissedCatchUp)),
			ran(ts(d+"10:20:00"), 3), ts(d + "12:00:00"), next(ts(d+"10:30:00"), 0)},
		{"start equal to end runs once", with(window, end(ts(d+"10:00:00"))), mscheduler.PlanState{}, ts(d + "09:00:00"),
			next(ts(d+"10:00:00"), 0)},
		{"start equal to end then done", with(window, end(ts(d+"10:00:00"))), ran(ts(d+"10:00:00"), 1), ts(d + "10:00:01"), done(0)},
		{"weekly time before start is not planned", with(mscheduler.Weekly(time.Monday, 9, 0), start(ts("2026-03-18 00:00:00"))),
			mscheduler.PlanState{}, ts("2026-03-15 00:00:00"), next(ts("2026-03-23 09:00:00"), 0)},
		{"cron time before start is not planned", with(mscheduler.Cron("0 * * * *"), start(ts(d+"10:30:00"))),
			mscheduler.PlanState{}, ts(d + "09:00:00"), next(ts(d+"11:00:00"), 0)},
		{"cron time on start is planned", with(mscheduler.Cron("0 * * * *"), start(ts(d+"10:00:00"))),
			mscheduler.PlanState{}, ts(d + "09:00:00"), next(ts(d+"10:00:00"), 0)},
		{"cron time on end is planned", with(mscheduler.Cron("0 * * * *"), end(ts(d+"11:00:00"))),
			ran(ts(d+"10:00:00"), 1), ts(d + "10:00:01"), next(ts(d+"11:00:00"), 0)},
		{"cron after end is done", with(mscheduler.Cron("0 * * * *"), end(ts(d+"11:00:00"))),
			ran(ts(d+"11:00:00"), 2), ts(d + "11:00:01"), done(0)},
	})
}

func TestPlanNextSkipNext(t *testing.T) {
	d := "2026-01-05 "
	window := with(mscheduler.Every(10, mscheduler.Minute), start(ts(d+"10:00:00")))
	skipState := func(last time.Time, runs, skip int) mscheduler.PlanState {
		return mscheduler.PlanState{Last: last, Runs: runs, SkipNext: skip}
	}
	runNextCases(t, []nextCase{
		{"skip next 2 after a run", window, skipState(ts(d+"10:00:00"), 1, 2), ts(d + "10:01:00"), next(ts(d+"10:30:00"), 2)},
		{"skip next 2 before the first run", window, skipState(time.Time{}, 0, 2), ts(d + "09:00:00"), next(ts(d+"10:20:00"), 2)},
		{"skip next 1 on a weekly plan", mscheduler.Weekly(time.Sunday, 9, 0), skipState(time.Time{}, 0, 1), ts("2026-03-14 10:00:00"),
			next(ts("2026-03-22 09:00:00"), 1)},
		{"skip next past end is done", with(window, end(ts(d+"10:20:00"))), skipState(ts(d+"10:00:00"), 1, 5), ts(d + "10:01:00"), done(2)},
		{"skip next 0 skips nothing", window, skipState(ts(d+"10:00:00"), 1, 0), ts(d + "10:01:00"), next(ts(d+"10:10:00"), 0)},
	})
}

func TestPlanValidate(t *testing.T) {
	t0 := ts("2026-01-05 10:00:00")
	bad := []struct {
		name  string
		plan  mscheduler.Plan
		field string
	}{
		{"every 0", mscheduler.Every(0, mscheduler.Minute), "Plan.Every"},
		{"every negative", mscheduler.Every(-1, mscheduler.Minute), "Plan.Every"},
		{"every 32767", mscheduler.Every(32767, mscheduler.Minute), "Plan.Every"},
		{"unknown unit", mscheduler.Every(1, "week"), "Plan.Unit"},
		{"empty unit", mscheduler.Every(1, ""), "Plan.Unit"},
		{"unknown zone", with(mscheduler.Every(1, mscheduler.Minute), zone("Mars/Olympus_Mons")), "Plan.Zone"},
		{"Local zone", with(mscheduler.Every(1, mscheduler.Minute), zone("Local")), "Plan.Zone"},
		{"bad cron", mscheduler.Cron("61 * * * *"), "Plan.Cron"},
		{"cron words", mscheduler.Cron("every monday"), "Plan.Cron"},
		{"cron 4 fields", mscheduler.Cron("* * * *"), "Plan.Cron"},
		{"cron 7 fields", mscheduler.Cron("* * * * * * *"), "Plan.Cron"},
		{"cron empty", mscheduler.Cron(""), "Plan.Cron"},
		{"cron @every", mscheduler.Cron("@every 1h"), "Plan.Cron"},
		{"cron with a zone", mscheduler.Cron("CRON_TZ=Europe/Berlin 0 9 * * *"), "Plan.Cron"},
		{"end before start", with(mscheduler.Every(1, mscheduler.Minute), start(t0), end(t0.Add(-time.Second))), "Plan.End"},
		{"repeat -2", with(mscheduler.Every(1, mscheduler.Minute), repeat(-2)), "Plan.Repeat"},
		{"once repeat 2", with(mscheduler.Once(t0), repeat(2)), "Plan.Repeat"},
		{"once without at", mscheduler.Once(time.Time{}), "Plan.At"},
		{"day 32", mscheduler.Monthly(32, 9, 0), "Plan.Day"},
		{"day -32", mscheduler.Monthly(-32, 9, 0), "Plan.Day"},
		{"weekday 7", mscheduler.Weekly(7, 9, 0), "Plan.Weekday"},
		{"weekday -1", mscheduler.Weekly(-1, 9, 0), "Plan.Weekday"},
		{"weekly time 24:00", mscheduler.Weekly(time.Monday, 24, 0), "Plan.Time"},
		{"monthly time 24:00", mscheduler.Monthly(1, 24, 0), "Plan.Time"},
		{"minute 60", mscheduler.Monthly(1, 9, 60), "Plan.Time"},
		{"negative hour", mscheduler.Weekly(time.Monday, -1, 0), "Plan.Time"},
		{"empty kind", mscheduler.Plan{}, "Plan.Kind"},
		{"unknown kind", mscheduler.Plan{Kind: "yearly"}, "Plan.Kind"},
		{"unknown missed", with(mscheduler.Every(1, mscheduler.Minute), missed("sometimes")), "Plan.Missed"},
		{"unknown overrun", with(mscheduler.Every(1, mscheduler.Minute), overrun("later")), "Plan.Overrun"},
		{"negative grace", with(mscheduler.Every(1, mscheduler.Minute), grace(-time.Second)), "Plan.Grace"},
		{"cron on an every plan", with(mscheduler.Every(1, mscheduler.Minute), func(p *mscheduler.Plan) { p.Cron = "* * * * *" }), "Plan.Cron"},
		{"day on a weekly plan", with(mscheduler.Weekly(time.Monday, 9, 0), func(p *mscheduler.Plan) { p.Day = 3 }), "Plan.Day"},
		{"at on a cron plan", with(mscheduler.Cron("@daily"), func(p *mscheduler.Plan) { p.At = t0 }), "Plan.At"},
		{"every on a monthly plan", with(mscheduler.Monthly(1, 9, 0), func(p *mscheduler.Plan) { p.Every = 2 }), "Plan.Every"},
		{"time on an every plan", with(mscheduler.Every(1, mscheduler.Day), func(p *mscheduler.Plan) { p.Time.Hour = 9 }), "Plan.Time"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			err := c.plan.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error on %s", c.field)
			}
			if !errors.Is(err, mscheduler.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var ie *mscheduler.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v (%T) is not an *InvalidError", err, err)
			}
			if ie.Field != c.field {
				t.Errorf("Field = %q, want %q (error: %v)", ie.Field, c.field, err)
			}
			// Next refuses the same plan with the same error.
			if _, nerr := c.plan.Next(mscheduler.PlanState{}, t0); !errors.Is(nerr, mscheduler.ErrInvalid) {
				t.Errorf("Next error = %v, want ErrInvalid", nerr)
			} else if errors.As(nerr, &ie); ie.Field != c.field {
				t.Errorf("Next error field = %q, want %q", ie.Field, c.field)
			}
		})
	}

	good := []struct {
		name string
		plan mscheduler.Plan
	}{
		{"every 1", mscheduler.Every(1, mscheduler.Second)},
		{"every 32766", mscheduler.Every(32766, mscheduler.Day)},
		{"every hours", mscheduler.Every(2, mscheduler.Hour)},
		{"day -31", mscheduler.Monthly(-31, 9, 0)},
		{"day 31", mscheduler.Monthly(31, 9, 0)},
		{"day 0", mscheduler.Monthly(0, 0, 0)},
		{"weekday Saturday at 23:59:59", with(mscheduler.Weekly(time.Saturday, 23, 59), func(p *mscheduler.Plan) { p.Time.Second = 59 })},
		{"weekday Sunday at midnight", mscheduler.Weekly(time.Sunday, 0, 0)},
		{"once", mscheduler.Once(t0)},
		{"once repeat 1", with(mscheduler.Once(t0), repeat(1))},
		{"cron 5 fields", mscheduler.Cron("0 9 * * 1-5")},
		{"cron 6 fields", mscheduler.Cron("0 0 9 * * 1-5")},
		{"cron descriptor", mscheduler.Cron("@monthly")},
		{"zones", with(mscheduler.Cron("@daily"), zone(lordHowe))},
		{"UTC zone", with(mscheduler.Cron("@daily"), zone("UTC"))},
		{"end equal to start", with(mscheduler.Every(1, mscheduler.Minute), start(t0), end(t0))},
		{"all policies", with(mscheduler.Every(1, mscheduler.Minute), missed(mscheduler.MissedRunOnce), overrun(mscheduler.OverrunQueue), grace(time.Minute), repeat(10))},
		{"repeat forever", with(mscheduler.Every(1, mscheduler.Minute), repeat(mscheduler.RepeatForever))},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			if err := c.plan.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

// TestPlanNextSkipNextAtTheEnd: skips asked for after the last planned
// time of the window finish the plan (found by the fuzzer).
func TestPlanNextSkipNextAtTheEnd(t *testing.T) {
	start := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	p := mscheduler.Every(3, mscheduler.Minute)
	p.Start, p.End, p.Missed = start, start, mscheduler.MissedCatchUp
	step, err := p.Next(mscheduler.PlanState{Last: start, Runs: 1, SkipNext: 1}, start.Add(10*time.Minute))
	if err != nil || !step.Done || !step.Next.IsZero() {
		t.Fatalf("step = %+v (%v), want Done", step, err)
	}
}
