package mscheduler

import (
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"

	"cmp"
	"errors"
	"strings"
	"time"
)

// planTimeOfDay is the layout of a stored plan's time of day.
const planTimeOfDay = "15:04:05"

// Dotted paths into a task's plan.
const (
	pPlanned  = stored.PPlanned
	pSkipNext = stored.PSkipNext
)

// missedOf is how many of a step's skipped planned times were missed
// rather than skipped on request: skipNext is the plan's skip_next that
// the step consumed (0 if it did not), and those skips count first.
func missedOf(step Step, skipNext int) int {
	return step.Skipped - min(max(skipNext, 0), step.Skipped)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func intPtr(v int, keep bool) *int {
	if !keep {
		return nil
	}
	return &v
}

// newPlanDoc is the stored form of a validated plan; start is its
// effective Start.
func newPlanDoc(p Plan, start time.Time) *planDoc {
	d := &planDoc{
		Kind: string(p.Kind), At: timePtr(p.At.Truncate(time.Millisecond)), Every: p.Every, Unit: string(p.Unit),
		Weekday: intPtr(int(p.Weekday), p.Kind == PlanWeekly), Day: intPtr(p.Day, p.Kind == PlanMonthly),
		Cron: p.Cron, Zone: p.Zone, Repeat: p.Repeat,
		Start: timePtr(start), End: timePtr(p.End.Truncate(time.Millisecond)),
		Missed: string(p.Missed), Overrun: string(p.Overrun), GraceMS: ms(p.Grace),
	}
	if d.Missed == "" {
		d.Missed = string(MissedSkip)
	}
	if p.Kind == PlanWeekly || p.Kind == PlanMonthly {
		d.Time = p.Time.String()
	}
	return d
}

// planOf is the definition of a stored plan back as a Plan; a time of day
// that does not parse is reported by the field name.
func planOf(d *planDoc) (Plan, error) {
	p := Plan{
		Kind: PlanKind(d.Kind), Every: d.Every, Unit: Unit(d.Unit), Cron: d.Cron, Zone: d.Zone, Repeat: d.Repeat,
		Missed: MissedPolicy(d.Missed), Overrun: OverrunPolicy(d.Overrun), Grace: fromMS(d.GraceMS),
	}
	for dst, src := range map[*time.Time]*time.Time{&p.At: d.At, &p.Start: d.Start, &p.End: d.End} {
		if src != nil {
			*dst = *src
		}
	}
	if d.Weekday != nil {
		p.Weekday = time.Weekday(*d.Weekday)
	}
	if d.Day != nil {
		p.Day = *d.Day
	}
	if d.Time != "" {
		t, err := parseTimeOfDay(d.Time)
		if err != nil {
			return Plan{}, invalid("plan.time", "%v", err)
		}
		p.Time = t
	}
	return p, nil
}

// scheduleOf compiles a stored plan, naming stored fields in its errors.
func scheduleOf(d *planDoc) (*schedule, error) {
	p, err := planOf(d)
	if err != nil {
		return nil, err
	}
	s, err := p.compile("plan.")
	var ie *InvalidError
	if errors.As(err, &ie) {
		ie.Field = strings.ToLower(ie.Field) // as stored: plan.every, plan.zone, ...
	}
	return s, err
}

// applyPlan validates a published task's plan and sets its first planned
// time, at now (server time), on doc.
func applyPlan(doc *taskDoc, p Plan, runAt, now time.Time, prefix string) error {
	if !runAt.IsZero() {
		return invalid(prefix+"RunAt", "must be zero for a task with a plan: the plan sets it")
	}
	if p.Start.IsZero() && p.Kind != PlanOnce {
		p.Start = now
		// Whole seconds read better, when that is not later than Grace.
		if grace := cmp.Or(p.Grace, GraceDefault); now.Sub(now.Truncate(time.Second)) <= grace {
			p.Start = now.Truncate(time.Second)
		}
	}
	p.Start = p.Start.Truncate(time.Millisecond)
	s, err := p.compile(prefix + "Plan.")
	if err != nil {
		return err
	}
	step := s.next(PlanState{}, now)
	doc.Plan = newPlanDoc(p, p.Start)
	doc.Plan.Skipped, doc.Plan.MissedCount = step.Skipped, missedOf(step, 0)
	if step.Done {
		return nil // planDone tells the publish
	}
	doc.RunAt, doc.Plan.Planned, doc.Plan.Scheduled = step.Next, step.Next, now
	return nil
}

// planDone says a published task's plan has no planned time left.
func planDone(doc *taskDoc) bool { return doc.Plan != nil && doc.Plan.Planned.IsZero() }
