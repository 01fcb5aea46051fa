package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/mscheduler/mscheduler/mscheduler"
)

func runPause(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	return c.onKey(ctx, fs, args, "pause", "paused", c.pause)
}

func runResume(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	return c.onKey(ctx, fs, args, "resume", "resumed", c.resume)
}

func (c *cli) pause(ctx context.Context, key string) error  { return c.producer.Pause(ctx, key) }
func (c *cli) resume(ctx context.Context, key string) error { return c.producer.Resume(ctx, key) }

// onKey runs a command whose only argument is a task key, and reports what
// it did ("paused KEY").
func (c *cli) onKey(ctx context.Context, fs *flag.FlagSet, args []string, verb, done string, do func(context.Context, string) error) error {
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(verb, args, "KEY"); err != nil {
		return err
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	key := args[0]
	if err := do(ctx, key); err != nil {
		return taskError(verb, key, err)
	}
	_, err = fmt.Fprintf(c.stdout, "%s %s\n", done, key)
	return err
}

func runSkip(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("skip", args, "KEY", "N"); err != nil {
		return err
	}
	key := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return usageErrorf("skip: N must be a whole number, got %q", args[1])
	}
	// The range of N is the library's to check: it names what it refuses.
	if err := c.open(ctx); err != nil {
		return err
	}
	if err := c.producer.SkipNext(ctx, key, n); err != nil {
		return taskError("skip", key, err)
	}
	count := strconv.Itoa(n)
	if n == 0 {
		count = "no"
	}
	_, err = fmt.Fprintf(c.stdout, "skipping %s planned time%s of %s\n", count, plural(n), key)
	return err
}

func runCancel(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	return c.onKey(ctx, fs, args, "cancel", "cancelled", func(ctx context.Context, key string) error { return c.producer.Cancel(ctx, key) })
}

func runRetry(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	return c.onKey(ctx, fs, args, "retry", "retrying", func(ctx context.Context, key string) error { return c.producer.Retry(ctx, key) })
}

func runRunNow(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	return c.onKey(ctx, fs, args, "run-now", "due now:", func(ctx context.Context, key string) error { return c.producer.RunNow(ctx, key) })
}

func runDelete(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	force := fs.Bool("force", false, "delete a task with runs going: cancel them first")
	return c.onKey(ctx, fs, args, "delete", "deleted", func(ctx context.Context, key string) error {
		return c.producer.Delete(ctx, key, &mscheduler.DeleteOpts{Force: *force})
	})
}
