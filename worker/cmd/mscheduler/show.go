package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// showBytes is how much of params and results show prints without --full.
const showBytes = 1 << 10

// showRuns is how many of the most recent runs show lists.
const showRuns = 5

// showUpcoming is how many upcoming planned times show lists.
const showUpcoming = 5

func runShow(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print a JSON object")
	full := fs.Bool("full", false, fmt.Sprintf("print params and results whole (they are cut at %d bytes otherwise)", showBytes))
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("show", args, "KEY"); err != nil {
		return err
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	key := args[0]
	ti, err := c.producer.Get(ctx, key)
	if err != nil {
		return taskError("show", key, err)
	}
	t := newTaskJSON(ti)
	t.Runs = runsJSON(ti.Runs)
	if *asJSON {
		return writeJSON(c, t)
	}
	return printTask(c, ti, t, *full)
}

// printTask writes the task as "name: value" lines; t is the same task
// already converted for JSON, for its params and results.
func printTask(c *cli, ti *info, t *taskJSON, full bool) error {
	task := &ti.Task
	w := tabwriter.NewWriter(c.stdout, 0, 0, 1, ' ', 0)
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s:\t%s\n", name, fmt.Sprintf(format, args...))
	}
	line("key", "%s", cell(task.Key))
	line("status", "%s", statusText(ti))
	if ti.Problem != "" {
		line("problem", "%s", cell(ti.Problem))
	}
	if inv := ti.Invalid; inv != nil {
		line("set invalid", "%s by %s, at %s (was %s)", timeText(inv.At), cell(inv.WorkerID), inv.Found, orText(inv.Was, "no status"))
		if r := inv.Run; r != nil {
			line("run then", "%s by %s, %s: not recorded in runs", r.RunID, r.WorkerID, r.Outcome)
		}
	}
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
	if len(task.Headers) > 0 {
		line("headers", "%s", headersText(task.Headers))
	}
	line("timeout", "%s", durationOr(task.Timeout, "the consumer's"))
	line("ping interval", "%s", task.PingInterval)
	line("worker timeout", "%s", task.WorkerTimeout)
	line("retries", "%s", retriesText(task.MaxRetries, task.RetryDelay))
	line("max failed runs", "%d", task.MaxFailedRuns)
	if p := task.Plan; p != nil {
		line("plan", "%s, %s", p.String(), p.RepeatString())
		line("plan window", "%s to %s", timeText(p.Start), orText(timeText(p.End), "no end"))
		line("plan policies", "missed %s, overrun %s, grace %s",
			cmp.Or(p.Missed, mscheduler.MissedSkip), cmp.Or(string(p.Overrun), "as missed"), cmp.Or(p.Grace, mscheduler.GraceDefault))
		if st := ti.Plan; st != nil {
			line("plan planned", "%s", timeText(st.Planned))
			line("plan runs", "%d run%s, %d skipped (%d missed), %d to skip next", st.Runs, plural(st.Runs), st.Skipped, st.Missed, st.SkipNext)
			line("plan next", "%s", upcomingText(ti, showUpcoming))
		}
	} else {
		line("plan", "none")
	}
	line("created", "%s", timeText(ti.CreatedAt))
	line("updated", "%s", timeText(ti.UpdatedAt))
	line("params", "%s", cut(string(t.Params), full))
	if last := lastError(ti.Runs); last != nil {
		line("last error", "%s (run %s, %s)", cell(truncate(last.Error, showBytes)), last.RunID, timeText(last.Finished))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return printRuns(c, t.Runs, full)
}

// printRuns lists the most recent runs, newest last.
func printRuns(c *cli, runs []runJSON, full bool) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(c.stdout, "recent runs:     none yet")
		return err
	}
	shown := runs[max(len(runs)-showRuns, 0):]
	fmt.Fprintf(c.stdout, "recent runs:     %d most recent of %d kept\n", len(shown), len(runs))
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  FINISHED\tOUTCOME\tWORKER\tATTEMPTS\tTOOK\tRESULT OR ERROR")
	for _, r := range shown {
		detail := cell(r.Error)
		if r.Error == "" {
			detail = cut(string(r.Result), full)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%s\t%s\n", timeText(r.Finished), r.Outcome, cell(r.WorkerID), r.Attempts,
			r.Finished.Sub(r.Started).Round(time.Millisecond), detail)
	}
	return w.Flush()
}

// lastError is the most recent run that ended with an error, or nil.
func lastError(runs []mscheduler.RunInfo) *mscheduler.RunInfo {
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Error != "" {
			return &runs[i]
		}
	}
	return nil
}

// cut shortens a rendered value to showBytes, saying how long it was,
// unless full.
func cut(s string, full bool) string {
	if full || len(s) <= showBytes {
		return s
	}
	end := showBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s… (%d bytes; --full prints it whole)", s[:end], len(s))
}

// upcomingText lists the task's upcoming planned times; without any, it
// says why.
func upcomingText(ti *info, n int) string {
	times := ti.Plan.Upcoming
	switch {
	case len(times) > 0:
	case ti.Problem != "":
		return "none until repaired"
	default:
		return "none: the task is " + string(ti.Status)
	}
	parts := make([]string, 0, n)
	for _, t := range times[:min(n, len(times))] {
		parts = append(parts, timeText(t))
	}
	return strings.Join(parts, ", ")
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

// headersText lists a task's headers as k=v, sorted by key.
func headersText(h map[string]string) string {
	parts := make([]string, 0, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, k+"="+cell(h[k]))
	}
	return strings.Join(parts, ", ")
}
