package mscheduler

import (
	"cmp"
	"errors"
	"strings"
	"time"
)

// Field names of a task's plan, under plan.
const (
	fPlan         = "plan"
	fPaused       = "paused"
	pPlanned      = "plan.planned"
	pRuns         = "plan.runs"
	pSkipped      = "plan.skipped"
	pMissedCount  = "plan.missed_count"
	pSkipNext     = "plan.skip_next"
	pScheduled    = "plan.scheduled"
	pStarted      = "plan.started"
	planTimeOfDay = "15:04:05"
)

// planDoc is the stored form of a plan: its definition, readable and
// editable in a database browser, and where it stands.
type planDoc struct {
	Kind    PlanKind      `bson:"kind"`
	At      *time.Time    `bson:"at,omitempty"`
	Every   int           `bson:"every,omitempty"`
	Unit    Unit          `bson:"unit,omitempty"`
	Weekday *int          `bson:"weekday,omitempty"`
	Day     *int          `bson:"day,omitempty"`
	Time    string        `bson:"time,omitempty"` // HH:MM:SS
	Cron    string        `bson:"cron,omitempty"`
	Zone    string        `bson:"zone,omitempty"`
	Repeat  int           `bson:"repeat"`
	Start   *time.Time    `bson:"start,omitempty"`
	End     *time.Time    `bson:"end,omitempty"`
	Missed  MissedPolicy  `bson:"missed"`
	Overrun OverrunPolicy `bson:"overrun,omitempty"`
	GraceMS int64         `bson:"grace_ms,omitempty"`

	// Planned is the planned time of the task's current occurrence: the
	// one its runs belong to, and the time its handler receives.
	Planned time.Time `bson:"planned,omitempty"`
	// Scheduled is when the task moved to Planned. A run that starts soon
	// after max(Planned, Scheduled) is on time, even if Planned is long
	// past (a queued overrun, a catch-up).
	Scheduled time.Time `bson:"scheduled,omitempty"`
	// Runs counts the occurrences that ran, Skipped the planned times that
	// did not, and MissedCount those of the skipped ones that were missed
	// (came and went without a run) rather than skipped on request
	// (skip_next). It is missed_count, not missed: missed is the policy.
	// A document written before it has none: 0.
	// Started says a run of the current occurrence has begun (and ended
	// without completing it, released say): the occurrence is completed
	// however late, never judged as missed.
	Started     bool `bson:"started,omitempty"`
	Runs        int  `bson:"runs"`
	Skipped     int  `bson:"skipped"`
	MissedCount int  `bson:"missed_count"`
	SkipNext    int  `bson:"skip_next"`
}

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
		Kind: p.Kind, At: timePtr(p.At.Truncate(time.Millisecond)), Every: p.Every, Unit: p.Unit,
		Weekday: intPtr(int(p.Weekday), p.Kind == PlanWeekly), Day: intPtr(p.Day, p.Kind == PlanMonthly),
		Cron: p.Cron, Zone: p.Zone, Repeat: p.Repeat,
		Start: timePtr(start), End: timePtr(p.End.Truncate(time.Millisecond)),
		Missed: p.Missed, Overrun: p.Overrun, GraceMS: ms(p.Grace),
	}
	if d.Missed == "" {
		d.Missed = MissedSkip
	}
	if p.Kind == PlanWeekly || p.Kind == PlanMonthly {
		d.Time = p.Time.String()
	}
	return d
}

// plan is the definition back as a Plan; a time of day that does not parse
// is reported by the field name.
func (d *planDoc) plan() (Plan, error) {
	p := Plan{
		Kind: d.Kind, Every: d.Every, Unit: d.Unit, Cron: d.Cron, Zone: d.Zone, Repeat: d.Repeat,
		Missed: d.Missed, Overrun: d.Overrun, Grace: fromMS(d.GraceMS),
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

// schedule compiles the stored plan, naming stored fields in its errors.
func (d *planDoc) schedule() (*schedule, error) {
	p, err := d.plan()
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
		doc.Status, doc.Free = StatusFinished, 0
		return nil
	}
	doc.RunAt, doc.Plan.Planned, doc.Plan.Scheduled = step.Next, step.Next, now
	return nil
}
