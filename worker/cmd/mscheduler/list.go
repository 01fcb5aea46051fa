package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// descriptionWidth keeps a row of the table on one screen line.
const descriptionWidth = 40

var statuses = []mscheduler.Status{
	mscheduler.StatusPending, mscheduler.StatusRunning, mscheduler.StatusSucceeded,
	mscheduler.StatusFailed, mscheduler.StatusFinished, mscheduler.StatusCancelled, mscheduler.StatusInvalid,
}

func runList(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var tags, statusNames stringsFlag
	fs.Var(&tags, "tag", "only tasks with this `tag` (repeat: all must match)")
	fs.Var(&statusNames, "status", "only tasks in this `status` (repeat: any may match)")
	group := fs.String("group", "", "only tasks of this `group`")
	sortName := fs.String("sort", "key", "the `order`: key, run_at (next run first) or priority (the claim order: highest first, then run_at)")
	var from, before time.Time
	fs.Var(timeFlag{&from}, "from", "only tasks whose next run (run_at) is at or after this `time`, RFC 3339")
	fs.Var(timeFlag{&before}, "before", "only tasks whose next run (run_at) is before this `time`, RFC 3339")
	limit := fs.Int("limit", mscheduler.ListLimitDefault, "at most this many tasks")
	after := fs.String("after", "", "only tasks after the task with this `key` in the order: the last key of the previous page")
	asJSON := fs.Bool("json", false, "print a JSON array")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("list", args); err != nil {
		return err
	}
	if *limit < 1 {
		return usageErrorf("list: --limit must be at least 1, got %d", *limit)
	}
	sort, ok := listSorts[*sortName]
	if !ok {
		return usageErrorf("list: unknown --sort %q: want key, run_at or priority", *sortName)
	}
	if !from.IsZero() && !before.IsZero() && !before.After(from) {
		return usageErrorf("list: --before (%s) must be after --from (%s)", before.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	}
	opts := mscheduler.ListOpts{Tags: tags, Group: *group, RunAtFrom: from, RunAtBefore: before, Sort: sort,
		Limit: *limit + 1, After: *after} // one more tells whether the limit cut the list
	for _, s := range statusNames {
		if s == "paused" {
			opts.Paused = true
			continue
		}
		if !slices.Contains(statuses, mscheduler.Status(s)) {
			return usageErrorf("list: unknown --status %q: want one of %s", s, joinStatuses())
		}
		opts.Statuses = append(opts.Statuses, mscheduler.Status(s))
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	tasks, err := c.producer.List(ctx, opts)
	if err != nil {
		return libraryError("list", err)
	}
	cut := len(tasks) > *limit
	if cut {
		tasks = tasks[:*limit]
	}
	if *asJSON {
		if cut {
			fmt.Fprintf(c.stderr, "mscheduler: list: more tasks match than the %d shown; read on with --after %s\n", *limit, tasks[len(tasks)-1].Task.Key)
		}
		return printListJSON(c, tasks)
	}
	return printTable(c, tasks, cut, sort)
}

// listSorts are the orders of --sort.
var listSorts = map[string]mscheduler.ListSort{
	"key": mscheduler.SortByKey, "run_at": mscheduler.SortByRunAt, "priority": mscheduler.SortByPriority,
}

func printListJSON(c *cli, tasks []info) error {
	out := make([]*taskJSON, 0, len(tasks))
	for i := range tasks {
		out = append(out, newTaskJSON(&tasks[i]))
	}
	return writeJSON(c, out)
}

// printTable prints tasks as a table, in the order sort gave them; sorted
// by priority, with a column for it.
func printTable(c *cli, tasks []info, cut bool, sort mscheduler.ListSort) error {
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	byPriority := sort == mscheduler.SortByPriority
	head := "KEY\tSTATUS\tRUNNING\tSUCCEEDED\tFAILED\tNEXT RUN\tTAGS\tDESCRIPTION"
	if byPriority {
		head = "KEY\tPRIORITY\t" + strings.TrimPrefix(head, "KEY\t")
	}
	fmt.Fprintln(w, head)
	for i := range tasks {
		ti := &tasks[i]
		t := &ti.Task
		fmt.Fprint(w, cell(t.Key), "\t")
		if byPriority {
			fmt.Fprint(w, t.Priority, "\t")
		}
		// Successes and failures are shown against what completes and
		// what fails the task: 1/2 needs one more success.
		fmt.Fprintf(w, "%s\t%d\t%d/%d\t%d/%d\t%s\t%s\t%s\n",
			statusText(ti), ti.Running, ti.Succeeded, t.Concurrency, ti.FailedRuns, t.MaxFailedRuns,
			nextRunText(ti), cell(strings.Join(t.Tags, ",")), truncate(cell(t.Description), descriptionWidth))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d task%s", len(tasks), plural(len(tasks)))
	if cut {
		summary += fmt.Sprintf(" shown; more match: read on with --after %s", tasks[len(tasks)-1].Task.Key)
	}
	if _, err := fmt.Fprintln(c.stdout, summary); err != nil {
		return err
	}
	return printProblems(c, tasks)
}

// printProblems says, under the table, why each task that cannot run as
// stored cannot.
func printProblems(c *cli, tasks []info) error {
	for i := range tasks {
		if p := tasks[i].Problem; p != "" {
			if _, err := fmt.Fprintf(c.stdout, "problem: %s: %s\n", cell(tasks[i].Task.Key), cell(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func joinStatuses() string {
	return joinNames(statuses) + ", paused"
}

// joinNames lists names for a message: "a, b, c".
func joinNames[S ~string](names []S) string {
	out := make([]string, len(names))
	for i, s := range names {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}
