package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// outcomes are the outcomes a run record may have, for --outcome.
var outcomes = []mscheduler.Outcome{
	mscheduler.OutcomeSucceeded, mscheduler.OutcomeFailed, mscheduler.OutcomeExpired, mscheduler.OutcomeReleased,
	mscheduler.OutcomeRevoked, mscheduler.OutcomeCancelled, mscheduler.OutcomeUnknown,
}

func runHistory(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var f mscheduler.RunFilter
	var outcome string
	fs.StringVar(&outcome, "outcome", "", "only runs with this `outcome` ("+joinNames(outcomes)+")")
	fs.StringVar(&f.WorkerID, "worker", "", "only runs of this worker `id`")
	fs.Var(timeFlag{&f.Since}, "since", "only runs that finished at or after this `time`, RFC 3339")
	fs.Var(timeFlag{&f.Until}, "until", "only runs that finished before this `time`, RFC 3339")
	fs.StringVar(&f.After, "after", "", "the `cursor` a previous page printed, to read on")
	fs.IntVar(&f.Limit, "limit", 20, "runs per page")
	asJSON := fs.Bool("json", false, "print a JSON object: the runs and the next cursor")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch len(args) {
	case 0:
	case 1:
		f.Key = args[0]
	default:
		return usageErrorf("history: want [KEY], got %d arguments", len(args))
	}
	if f.Limit < 1 || f.Limit > mscheduler.RunsLimitMax {
		return usageErrorf("history: --limit must be from 1 to %d, got %d", mscheduler.RunsLimitMax, f.Limit)
	}
	f.Outcome = mscheduler.Outcome(outcome)
	if outcome != "" && !slices.Contains(outcomes, f.Outcome) {
		return usageErrorf("history: unknown --outcome %q: want one of %s", outcome, joinNames(outcomes))
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	page, err := c.producer.Runs(ctx, f)
	if err != nil {
		return libraryError("history", err)
	}
	if *asJSON {
		// historyJSON is a run of the history, with the problem of a
		// record that cannot be read as stored.
		type historyJSON struct {
			runJSON
			Problem string `json:"problem,omitempty"`
		}
		runs := make([]historyJSON, len(page.Runs))
		for i := range page.Runs {
			runs[i] = historyJSON{runJSON: newRunJSON(&page.Runs[i]), Problem: page.Runs[i].Problem}
			runs[i].Key = page.Runs[i].Key
		}
		return writeJSON(c, struct {
			Runs []historyJSON `json:"runs"`
			Next string        `json:"next,omitempty"`
		}{runs, page.Next})
	}
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FINISHED\tKEY\tOUTCOME\tWORKER\tATTEMPTS\tTOOK\tRUN\tERROR")
	for _, r := range page.Runs {
		took := "-" // unknown for a record that lacks a time
		if !r.Started.IsZero() && !r.Finished.IsZero() {
			took = r.Finished.Sub(r.Started).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", timeText(r.Finished), cell(r.Key), cell(string(r.Outcome)), cell(r.WorkerID), r.Attempts,
			took, cell(r.RunID), truncate(cell(r.Error), descriptionWidth))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d run%s, newest first", len(page.Runs), plural(len(page.Runs)))
	if page.Next != "" {
		summary += "; more with --after " + page.Next
	}
	if _, err := fmt.Fprintln(c.stdout, summary); err != nil {
		return err
	}
	// As list does for tasks: under the table, why each record that
	// cannot be read as stored cannot.
	for i := range page.Runs {
		if p := page.Runs[i].Problem; p != "" {
			if _, err := fmt.Fprintf(c.stdout, "problem: %s: %s\n", cell(page.Runs[i].RunID), cell(p)); err != nil {
				return err
			}
		}
	}
	return nil
}
