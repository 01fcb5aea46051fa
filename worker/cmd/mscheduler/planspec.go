package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// parsePlan reads the short plan syntax of publish --plan:
//
//	once 2026-12-24T18:00:00Z
//	every 5m | every 30s | every 2h | every 1d | every 15 minutes
//	weekly sun 10:00 | weekly monday 09:30:00
//	monthly -1 09:30 | monthly 15 08:00
//	cron "0 7 * * 1-5" | cron 0 7 * * 1-5
//
// Its errors say what was expected; the plan's values are checked by the
// library (Plan.Validate), which names the field.
func parsePlan(spec string) (mscheduler.Plan, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(spec), " ")
	rest = strings.TrimSpace(rest)
	args := strings.Fields(rest)
	switch strings.ToLower(kind) {
	case "once":
		if len(args) != 1 {
			return mscheduler.Plan{}, fmt.Errorf("want \"once TIME\" (RFC 3339), got %q", spec)
		}
		at, err := time.Parse(time.RFC3339, args[0])
		if err != nil {
			return mscheduler.Plan{}, fmt.Errorf("once: the time must be RFC 3339, like 2026-12-24T18:00:00Z, got %q", args[0])
		}
		return mscheduler.Once(at), nil
	case "every":
		n, unit, err := parseEvery(args)
		if err != nil {
			return mscheduler.Plan{}, err
		}
		return mscheduler.Every(n, unit), nil
	case "weekly":
		if len(args) != 2 {
			return mscheduler.Plan{}, fmt.Errorf("want \"weekly DAY HH:MM\", like weekly sun 10:00, got %q", spec)
		}
		day, ok := weekdays[strings.ToLower(args[0])]
		if !ok {
			return mscheduler.Plan{}, fmt.Errorf("weekly: the day must be sun, mon, ... sat, got %q", args[0])
		}
		t, err := parseClock(args[1])
		if err != nil {
			return mscheduler.Plan{}, fmt.Errorf("weekly: %w", err)
		}
		p := mscheduler.Weekly(day, 0, 0)
		p.Time = t
		return p, nil
	case "monthly":
		if len(args) != 2 {
			return mscheduler.Plan{}, fmt.Errorf("want \"monthly DAY HH:MM\", like monthly -1 09:30, got %q", spec)
		}
		day, err := strconv.Atoi(args[0])
		if err != nil {
			return mscheduler.Plan{}, fmt.Errorf("monthly: the day must be a number from -31 to 31 (0: the last day), got %q", args[0])
		}
		t, err := parseClock(args[1])
		if err != nil {
			return mscheduler.Plan{}, fmt.Errorf("monthly: %w", err)
		}
		p := mscheduler.Monthly(day, 0, 0)
		p.Time = t
		return p, nil
	case "cron":
		expr := strings.Trim(rest, `"'`)
		if expr == "" {
			return mscheduler.Plan{}, fmt.Errorf("want \"cron EXPR\", like cron \"0 7 * * 1-5\", got %q", spec)
		}
		return mscheduler.Cron(expr), nil
	}
	return mscheduler.Plan{}, fmt.Errorf("must start with once, every, weekly, monthly or cron, got %q", spec)
}

var weekdays = map[string]time.Weekday{}

func init() {
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := strings.ToLower(d.String())
		weekdays[name], weekdays[name[:3]] = d, d
	}
}

var units = map[string]mscheduler.Unit{
	"s": mscheduler.Second, "second": mscheduler.Second, "seconds": mscheduler.Second,
	"m": mscheduler.Minute, "minute": mscheduler.Minute, "minutes": mscheduler.Minute,
	"h": mscheduler.Hour, "hour": mscheduler.Hour, "hours": mscheduler.Hour,
	"d": mscheduler.Day, "day": mscheduler.Day, "days": mscheduler.Day,
}

// parseEvery reads "5m", or "15 minutes".
func parseEvery(args []string) (int, mscheduler.Unit, error) {
	bad := fmt.Errorf("want \"every N UNIT\", like every 5m or every 15 minutes (units s, m, h, d), got %q", strings.Join(args, " "))
	var number, unit string
	switch len(args) {
	case 1:
		i := strings.IndexFunc(args[0], func(r rune) bool { return r < '0' || r > '9' })
		if i <= 0 {
			return 0, "", bad
		}
		number, unit = args[0][:i], args[0][i:]
	case 2:
		number, unit = args[0], args[1]
	default:
		return 0, "", bad
	}
	n, err := strconv.Atoi(number)
	u, ok := units[strings.ToLower(unit)]
	if err != nil || !ok {
		return 0, "", bad
	}
	return n, u, nil
}

// parseClock reads HH:MM or HH:MM:SS.
func parseClock(s string) (mscheduler.TimeOfDay, error) {
	var t mscheduler.TimeOfDay
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return t, fmt.Errorf("the time must be HH:MM or HH:MM:SS, got %q", s)
	}
	vals := make([]int, 3)
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return t, fmt.Errorf("the time must be HH:MM or HH:MM:SS, got %q", s)
		}
		vals[i] = v
	}
	return mscheduler.TimeOfDay{Hour: vals[0], Minute: vals[1], Second: vals[2]}, nil
}
