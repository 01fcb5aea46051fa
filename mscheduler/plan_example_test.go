package mscheduler_test

import (
	"fmt"
	"time"
	_ "time/tzdata" // zones without system data

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Walk a plan's planned times: each planned time becomes the state's Last.
func ExamplePlan_Next() {
	p := mscheduler.Every(15, mscheduler.Minute)
	p.Start = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

	var st mscheduler.PlanState
	now := p.Start
	for range 4 {
		step, err := p.Next(st, now)
		if err != nil {
			panic(err)
		}
		fmt.Println(step.Next.Format("2006-01-02 15:04 MST"))
		st.Last, st.Runs, now = step.Next, st.Runs+1, step.Next
	}
	// Output:
	// 2026-01-05 09:00 UTC
	// 2026-01-05 09:15 UTC
	// 2026-01-05 09:30 UTC
	// 2026-01-05 09:45 UTC
}

// Day 31 runs on the last day of shorter months, and day 0 always on the
// last day: February 29 in a leap year.
func ExampleMonthly() {
	for _, c := range []struct {
		day  int
		from time.Time
	}{
		{31, time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC)},
		{0, time.Date(2028, 1, 15, 0, 0, 0, 0, time.UTC)},
	} {
		p := mscheduler.Monthly(c.day, 18, 0)
		fmt.Printf("day %d:", c.day)
		st := mscheduler.PlanState{}
		for range 4 {
			step, err := p.Next(st, c.from)
			if err != nil {
				panic(err)
			}
			fmt.Print(" ", step.Next.Format("Jan 2"))
			st.Last, st.Runs = step.Next, st.Runs+1
		}
		fmt.Println()
	}
	// Output:
	// day 31: Jan 31 Feb 28 Mar 31 Apr 30
	// day 0: Jan 31 Feb 29 Mar 31 Apr 30
}

// A cron plan reads its times in Plan.Zone. On 2026-03-08 New York's clocks
// jump from 02:00 to 03:00: 02:30 does not exist that day, and the plan
// runs at 03:00, the first instant after the gap.
func ExampleCron() {
	p := mscheduler.Cron("30 2 * * *")
	p.Zone = "America/New_York"
	ny, err := time.LoadLocation(p.Zone)
	if err != nil {
		panic(err)
	}

	st := mscheduler.PlanState{}
	now := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
	for range 4 {
		step, err := p.Next(st, now)
		if err != nil {
			panic(err)
		}
		fmt.Println(step.Next.In(ny).Format("Mon 2006-01-02 15:04 MST"), "=", step.Next.UTC().Format("15:04 MST"))
		st.Last, st.Runs = step.Next, st.Runs+1
	}
	// Output:
	// Sat 2026-03-07 02:30 EST = 07:30 UTC
	// Sun 2026-03-08 03:00 EDT = 07:00 UTC
	// Mon 2026-03-09 02:30 EDT = 06:30 UTC
	// Tue 2026-03-10 02:30 EDT = 06:30 UTC
}

// A plan every 3 minutes last ran its 10:00 planned time; at 10:10 the
// workers are back. Run once runs the latest missed planned time, 10:09,
// then continues on the grid; skip waits for 10:12; catch up runs 10:03.
func ExampleMissedRunOnce() {
	at := func(hhmm string) time.Time {
		t, err := time.Parse("2006-01-02 15:04", "2026-01-05 "+hhmm)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, policy := range []mscheduler.MissedPolicy{mscheduler.MissedRunOnce, mscheduler.MissedSkip, mscheduler.MissedCatchUp} {
		p := mscheduler.Every(3, mscheduler.Minute)
		p.Start = at("10:00")
		p.Missed = policy

		st := mscheduler.PlanState{Last: at("10:00"), Runs: 1}
		step, err := p.Next(st, at("10:10"))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-8s next %s, skipped %d", policy, step.Next.Format("15:04"), step.Skipped)
		if policy == mscheduler.MissedRunOnce {
			// Its run at 10:10 done, the plan is back on the grid.
			st = mscheduler.PlanState{Last: step.Next, Runs: 2}
			step, err = p.Next(st, at("10:10"))
			if err != nil {
				panic(err)
			}
			fmt.Printf(", then %s", step.Next.Format("15:04"))
		}
		fmt.Println()
	}
	// Output:
	// run_once next 10:09, skipped 2, then 10:12
	// skip     next 10:12, skipped 3
	// catch_up next 10:03, skipped 0
}

// Repeat counts planned times, run or skipped: a plan of 3 hourly planned
// times whose last one passed before it could run (the workers were down)
// finishes without running; with one planned time still ahead, it runs
// that one.
func ExamplePlan_Next_repeat() {
	p := mscheduler.Every(1, mscheduler.Hour)
	p.Start, p.Repeat = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC), 3
	for _, now := range []time.Time{
		time.Date(2026, 1, 5, 5, 30, 0, 0, time.UTC), // all three passed
		time.Date(2026, 1, 5, 1, 30, 0, 0, time.UTC), // 00:00 and 01:00 passed
	} {
		step, _ := p.Next(mscheduler.PlanState{}, now)
		if step.Done {
			fmt.Printf("at %s: finished, %d skipped\n", now.Format("15:04"), step.Skipped)
		} else {
			fmt.Printf("at %s: next %s, %d skipped\n", now.Format("15:04"), step.Next.Format("15:04"), step.Skipped)
		}
	}
	// Output:
	// at 05:30: finished, 3 skipped
	// at 01:30: next 02:00, 2 skipped
}

// Upcoming previews the planned times the workers will run.
func ExamplePlan_Upcoming() {
	p := mscheduler.Weekly(time.Monday, 9, 30)
	p.Zone, p.Start = "Europe/Berlin", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	times, _ := p.Upcoming(mscheduler.PlanState{}, p.Start, 3)
	for _, t := range times {
		fmt.Println(t.UTC().Format("2006-01-02 15:04 MST"))
	}
	// Output:
	// 2026-03-02 08:30 UTC
	// 2026-03-09 08:30 UTC
	// 2026-03-16 08:30 UTC
}

// String says when a plan runs, as the operator command and the dashboard
// show it.
func ExamplePlan_String() {
	weekly := mscheduler.Weekly(time.Monday, 9, 30)
	weekly.Zone = "Europe/Berlin"
	fmt.Println(mscheduler.Every(15, mscheduler.Minute))
	fmt.Println(weekly)
	fmt.Println(mscheduler.Monthly(-1, 18, 0))
	fmt.Println(mscheduler.Cron("0 7 * * 1-5"))
	// Output:
	// every 15 minutes
	// weekly on Monday at 09:30:00 Europe/Berlin
	// monthly on the day before the last at 18:00:00
	// cron "0 7 * * 1-5"
}

func ExamplePlan_RepeatString() {
	for _, repeat := range []int{0, 1, 3, mscheduler.RepeatForever} {
		plan := mscheduler.Every(1, mscheduler.Hour)
		plan.Repeat = repeat
		fmt.Println(repeat, plan.RepeatString())
	}
	// Output:
	// 0 once
	// 1 once
	// 3 3 times
	// -1 forever
}
