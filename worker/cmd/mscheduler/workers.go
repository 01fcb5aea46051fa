package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/mscheduler/mscheduler/mscheduler"
)

func runWorkers(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	asJSON := fs.Bool("json", false, "print a JSON array")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("workers", args); err != nil {
		return err
	}
	if err := c.connectDB(); err != nil {
		return err
	}
	ws, err := mscheduler.ListWorkers(ctx, c.client.Database(c.db))
	if err != nil {
		return libraryError("workers", err)
	}
	if *asJSON {
		type workerJSON struct {
			mscheduler.WorkerInfo
			ID    string `json:"id"`
			Stale bool   `json:"stale"`
		}
		out := make([]workerJSON, len(ws))
		for i, w := range ws {
			out[i] = workerJSON{WorkerInfo: w, ID: w.ID, Stale: w.Stale}
		}
		return writeJSON(c, out)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tHOST\tPID\tVERSION\tRUNNING\tCOLLECTIONS\tGROUPS\tLAST SEEN\tSTARTED")
	live := 0
	for _, w := range ws {
		state := "live"
		if w.Stale {
			state = "stale"
		} else {
			live++
		}
		// An executor of the gateway has no process of its own, and no
		// capacity but what it takes: "-" and its runs alone, not PID 0
		// and "5/0".
		pid, running := "-", fmt.Sprint(w.Running)
		if w.PID != 0 {
			pid = fmt.Sprint(w.PID)
		}
		if w.Capacity != 0 {
			running = fmt.Sprintf("%d/%d", w.Running, w.Capacity)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(w.ID), state, cell(w.Host), pid, cell(w.Version), running,
			orText(strings.Join(w.Collections, ","), "-"), orText(strings.Join(w.Groups, ","), "-"), timeText(w.LastSeen), timeText(w.StartedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c.stdout, "%d worker%s: %d live, %d stale (no heartbeat for %d intervals)\n", len(ws), plural(len(ws)), live, len(ws)-live, mscheduler.StaleAfterBeats); err != nil {
		return err
	}
	// As list does for tasks: under the table, why each worker document
	// that cannot be read as stored cannot.
	for _, w := range ws {
		if w.Problem != "" {
			if _, err := fmt.Fprintf(c.stdout, "problem: %s: %s\n", cell(w.ID), cell(w.Problem)); err != nil {
				return err
			}
		}
	}
	return nil
}
