package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

func runUpdate(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var u mscheduler.TaskUpdate
	collect := updateFlags(fs, &u)
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("update", args, "KEY"); err != nil {
		return err
	}
	if collect() == 0 {
		return usageErrorf("update: nothing to change; run \"mscheduler update -h\" for the flags")
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	key := args[0]
	if err := c.producer.Update(ctx, key, u); err != nil {
		return taskError("update", key, err)
	}
	_, err = fmt.Fprintf(c.stdout, "updated %s\n", key)
	return err
}

// updateFlags registers a flag for each TaskUpdate field. The returned
// collect sets on u the fields whose flags were given, and only those, so
// that "--priority 0" sets the priority to zero while leaving the flag out
// leaves it alone; it returns how many it set. Validation is the library's:
// it names the field it refuses.
func updateFlags(fs *flag.FlagSet, u *mscheduler.TaskUpdate) (collect func() int) {
	var v struct {
		priority, concurrency, maxRetries, maxFailedRuns int
		pingInterval, workerTimeout, retryDelay, timeout time.Duration
		group, description, source                       string
		workerIDs, tags                                  listFlag
	}
	fs.IntVar(&v.priority, "priority", 0, "claim order: higher first")
	fs.IntVar(&v.concurrency, "concurrency", 0, "successful runs that complete the task")
	fs.Var(&v.workerIDs, "worker-ids", "comma-separated `ids` of the workers allowed (empty: any)")
	fs.StringVar(&v.group, "group", "", "the worker `group` allowed (empty: any)")
	durationVar(fs, &v.pingInterval, "ping-interval", "lease renewal period, like 10s")
	durationVar(fs, &v.workerTimeout, "worker-timeout", "lease length, like 30s")
	fs.IntVar(&v.maxRetries, "max-retries", 0, "local retries after a handler error (-1: none)")
	durationVar(fs, &v.retryDelay, "retry-delay", "delay before the first local retry, like 1s")
	fs.IntVar(&v.maxFailedRuns, "max-failed-runs", 0, "failed runs that fail the task")
	durationVar(fs, &v.timeout, "timeout", "deadline of each handler attempt, like 10m (0s: the consumer's)")
	fs.StringVar(&v.description, "description", "", "what the task is, for people")
	fs.StringVar(&v.source, "source", "", "who published the task")
	fs.Var(&v.tags, "tags", "comma-separated `tags` (empty: none)")
	return func() int {
		n := 0
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "priority":
				u.Priority = &v.priority
			case "concurrency":
				u.Concurrency = &v.concurrency
			case "worker-ids":
				u.WorkerIDs = (*[]string)(&v.workerIDs)
			case "group":
				u.Group = &v.group
			case "ping-interval":
				u.PingInterval = &v.pingInterval
			case "worker-timeout":
				u.WorkerTimeout = &v.workerTimeout
			case "max-retries":
				u.MaxRetries = &v.maxRetries
			case "retry-delay":
				u.RetryDelay = &v.retryDelay
			case "max-failed-runs":
				u.MaxFailedRuns = &v.maxFailedRuns
			case "timeout":
				u.Timeout = &v.timeout
			case "description":
				u.Description = &v.description
			case "source":
				u.Source = &v.source
			case "tags":
				u.Tags = (*[]string)(&v.tags)
			default: // a global flag
				return
			}
			n++
		})
		return n
	}
}
