package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// errWaitedBadly ends a wait whose task did not succeed: exit status 1.
var errWaitedBadly = errors.New("the task did not succeed")

func runWait(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", "give up after this long, like 10m (default: wait for ever)")
	asJSON := fs.Bool("json", false, "print the task as show --json does")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("wait", args, "KEY"); err != nil {
		return err
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	key := args[0]
	ti, err := c.producer.Wait(ctx, key)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &opError{msg: fmt.Sprintf("wait %q: still not done after %s", key, timeout), err: err}
	case err != nil:
		return taskError("wait", key, err)
	}
	if *asJSON {
		t := newTaskJSON(ti)
		t.Runs = runsJSON(ti.Runs)
		if err := writeJSON(c, t); err != nil {
			return err
		}
	} else {
		line := fmt.Sprintf("%s %s", key, ti.Status)
		if n := len(ti.Runs); n > 0 {
			last := newRunJSON(&ti.Runs[n-1])
			switch {
			case last.Error != "":
				line += ": " + cell(last.Error)
			case last.Result != nil:
				line += ": " + cut(string(last.Result), false)
			}
		} else if ti.Problem != "" {
			line += ": " + cell(ti.Problem)
		}
		if _, err := fmt.Fprintln(c.stdout, line); err != nil {
			return err
		}
	}
	if ti.Status != mscheduler.StatusSucceeded && ti.Status != mscheduler.StatusFinished {
		return errWaitedBadly
	}
	return nil
}
