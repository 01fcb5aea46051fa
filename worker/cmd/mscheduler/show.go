package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

func runShow(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print a JSON object")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("show", args, "KEY"); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	key := args[0]
	ti, err := c.producer.Get(ctx, key)
	if err != nil {
		return taskError("show", key, err)
	}
	t, err := newTaskJSON(ti)
	if err != nil {
		return libraryError(err)
	}
	if *asJSON {
		return writeJSON(c, t)
	}
	return printTask(c, ti, t)
}

// printTask writes the task as "name: value" lines; t is the same task
// already converted for JSON, for its params.
func printTask(c *cli, ti *info, t *taskJSON) error {
	task := &ti.Task
	w := tabwriter.NewWriter(c.stdout, 0, 0, 1, ' ', 0)
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s:\t%s\n", name, fmt.Sprintf(format, args...))
	}
	line("key", "%s", cell(task.Key))
	line("status", "%s", statusText(ti))
	line("next run", "%s", nextRunText(ti))
	line("priority", "%d", task.Priority)
	if task.DistinctWorkers {
		line("concurrency", "%d, distinct workers", task.Concurrency)
	} else {
		line("concurrency", "%d", task.Concurrency)
	}
	line("runs", "%d free, %d running, %d succeeded, %d failed", ti.Free, ti.Running, ti.Succeeded, ti.FailedRuns)
	line("worker ids", "%s", orText(strings.Join(task.WorkerIDs, ", "), "any"))
	line("group", "%s", orText(task.Group, "any"))
	line("description", "%s", cell(task.Description))
	line("source", "%s", cell(task.Source))
	line("tags", "%s", orText(strings.Join(task.Tags, ", "), "-"))
	line("timeout", "%s", durationOr(task.Timeout, "the consumer's"))
	line("ping interval", "%s", task.PingInterval)
	line("worker timeout", "%s", task.WorkerTimeout)
	line("retries", "%s", retriesText(task.MaxRetries, task.RetryDelay))
	line("max failed runs", "%d", task.MaxFailedRuns)
	if p := task.Plan; p != nil {
		line("plan", "%s, %s", planSpec(p), repeatText(p.Repeat))
		line("plan window", "%s to %s", timeText(p.Start), orText(timeText(p.End), "no end"))
		line("plan policies", "missed %s, overrun %s, grace %s",
			cmp.Or(p.Missed, mscheduler.MissedSkip), cmp.Or(string(p.Overrun), "as missed"), cmp.Or(p.Grace, mscheduler.GraceDefault))
		if st := ti.Plan; st != nil {
			line("plan planned", "%s", timeText(st.Planned))
			line("plan runs", "%d run%s, %d skipped, %d to skip next", st.Runs, plural(st.Runs), st.Skipped, st.SkipNext)
		}
	} else {
		line("plan", "none")
	}
	line("created", "%s", timeText(ti.CreatedAt))
	line("updated", "%s", timeText(ti.UpdatedAt))
	line("params", "%s", t.Params)
	return w.Flush()
}

func retriesText(n int, delay time.Duration) string {
	if n == mscheduler.NoRetries || n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, first after %s", n, delay)
}

func durationOr(d time.Duration, zero string) string {
	if d == 0 {
		return zero
	}
	return d.String()
}

// orText is s, or instead when s is empty or "-".
func orText(s, instead string) string {
	if s == "" || s == "-" {
		return instead
	}
	return s
}
