package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

func TestParsePlan(t *testing.T) {
	at := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	weekly := mscheduler.Weekly(time.Sunday, 10, 0)
	monthly := mscheduler.Monthly(-1, 9, 30)
	withSeconds := mscheduler.Weekly(time.Monday, 9, 30)
	withSeconds.Time.Second = 15
	for _, tc := range []struct {
		spec string
		want mscheduler.Plan
	}{
		{"once 2026-12-24T18:00:00Z", mscheduler.Once(at)},
		{"every 5m", mscheduler.Every(5, mscheduler.Minute)},
		{"every 30s", mscheduler.Every(30, mscheduler.Second)},
		{"every 2 hours", mscheduler.Every(2, mscheduler.Hour)},
		{"every 1d", mscheduler.Every(1, mscheduler.Day)},
		{"weekly sun 10:00", weekly},
		{"Weekly Monday 09:30:15", withSeconds},
		{"monthly -1 09:30", monthly},
		{`cron "0 7 * * 1-5"`, mscheduler.Cron("0 7 * * 1-5")},
		{"cron */10 * * * * *", mscheduler.Cron("*/10 * * * * *")},
	} {
		got, err := parsePlan(tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("parsePlan(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	for spec, want := range map[string]string{
		"":                    "must start with once, every",
		"hourly":              "must start with once, every",
		"every five m":        "every N UNIT",
		"every 5 fortnights":  "every N UNIT",
		"weekly funday 10:00": "sun, mon",
		"weekly sun":          "weekly DAY HH:MM",
		"monthly last 10:00":  "from -31 to 31",
		"monthly 1 10h":       "HH:MM",
		"once tomorrow":       "RFC 3339",
		"cron":                "cron EXPR",
	} {
		if _, err := parsePlan(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parsePlan(%q): %v, want an error saying %q", spec, err, want)
		}
	}
}
