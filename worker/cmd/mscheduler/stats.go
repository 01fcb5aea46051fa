package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"
)

func runStats(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print a JSON object")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("stats", args); err != nil {
		return err
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	s, err := c.producer.Stats(ctx)
	if err != nil {
		return libraryError("stats", err)
	}
	var oldestAge time.Duration
	if !s.OldestDue.IsZero() {
		oldestAge = s.At.Sub(s.OldestDue).Round(time.Second)
	}
	if *asJSON {
		byStatus := map[string]int64{}
		for st, n := range s.ByStatus {
			byStatus[string(st)] = n
		}
		return writeJSON(c, struct {
			ByStatus         map[string]int64 `json:"by_status"`
			Due              int64            `json:"due"`
			OldestDue        time.Time        `json:"oldest_due,omitzero"`
			OldestDueAgeMS   int64            `json:"oldest_due_age_ms"`
			RunsLastHour     int64            `json:"runs_last_hour"`
			FailuresLastHour int64            `json:"failures_last_hour"`
			At               time.Time        `json:"at"`
		}{byStatus, s.Due, s.OldestDue.UTC(), oldestAge.Milliseconds(), s.RunsLastHour, s.FailuresLastHour, s.At.UTC()})
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 1, ' ', 0)
	for _, st := range statuses {
		fmt.Fprintf(w, "%s:\t%d\n", st, s.ByStatus[st])
	}
	fmt.Fprintf(w, "queue depth:\t%d due now\n", s.Due)
	if s.OldestDue.IsZero() {
		fmt.Fprintf(w, "oldest due:\tnone waiting\n")
	} else {
		fmt.Fprintf(w, "oldest due:\t%s, waiting %s\n", timeText(s.OldestDue), oldestAge)
	}
	fmt.Fprintf(w, "last hour:\t%d run%s ended, %d failed or expired\n", s.RunsLastHour, plural(int(s.RunsLastHour)), s.FailuresLastHour)
	return w.Flush()
}
