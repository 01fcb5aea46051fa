package mscheduler

import (
	"fmt"
	"time"
)

// String says when the plan runs, in words: "every 15 minutes",
// "weekly on Monday at 09:30:00 Europe/Berlin", "cron \"0 7 * * 1-5\"".
func (p Plan) String() string {
	var s string
	switch p.Kind {
	case PlanOnce:
		s = "once at " + p.At.UTC().Format(time.RFC3339)
	case PlanEvery:
		s = fmt.Sprintf("every %d %s%s", p.Every, p.Unit, plural(p.Every))
	case PlanWeekly:
		s = fmt.Sprintf("weekly on %s at %s", p.Weekday, p.Time)
	case PlanMonthly:
		s = fmt.Sprintf("monthly on %s at %s", monthDayText(p.Day), p.Time)
	case PlanCron:
		s = fmt.Sprintf("cron %q", p.Cron)
	default:
		s = string(p.Kind)
	}
	if p.Zone != "" && p.Zone != "UTC" {
		s += " " + p.Zone
	}
	return s
}

// RepeatString says how many planned times the plan has, from Repeat:
// "once" (0 or 1), "3 times", "forever".
func (p Plan) RepeatString() string {
	switch {
	case p.Repeat == RepeatForever:
		return "forever"
	case p.Repeat <= 1:
		return "once"
	}
	return fmt.Sprintf("%d times", p.Repeat)
}

// monthDayText reads Plan.Day: 1…31, 0 for the last day, below 0 counted
// back from it.
func monthDayText(day int) string {
	switch {
	case day == 0:
		return "the last day"
	case day == -1:
		return "the day before the last"
	case day < 0:
		return fmt.Sprintf("%d days before the last", -day)
	}
	return fmt.Sprintf("day %d", day)
}
