package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// publishFlags are the flags of publish: the task's options and its plan.
type publishFlags struct {
	params, plan, zone, missed, overrun, group, description, source string
	runAt, start, end                                               time.Time
	in, pingInterval, workerTimeout, retryDelay, timeout, grace     time.Duration
	priority, concurrency, maxRetries, maxFailedRuns, repeat        int
	distinct, updateParams, moveRunAt, resetFinished, create        bool
	workerIDs, tags                                                 listFlag
}

func (f *publishFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.params, "params", "", "the params as JSON (extended JSON for dates and the like), like '{\"to\":\"ada@example.com\"}'")
	fs.Var(timeFlag{&f.runAt}, "run-at", "the earliest `time` it may run, RFC 3339 (default: now)")
	durationVar(fs, &f.in, "in", "run it this long from now, like 10m (instead of --run-at)")
	fs.StringVar(&f.plan, "plan", "", "make it recurring: \"every 5m\", \"weekly sun 10:00\", \"monthly -1 09:30\", \"cron '0 7 * * 1-5'\", \"once TIME\"")
	fs.StringVar(&f.zone, "zone", "", "the plan's IANA time `zone` (default UTC)")
	fs.IntVar(&f.repeat, "repeat", 0, "the plan's planned times: N, or -1 for ever (default: for ever, once for \"once\")")
	fs.Var(timeFlag{&f.start}, "start", "the plan's first `time`, RFC 3339 (default: now)")
	fs.Var(timeFlag{&f.end}, "end", "the plan's last `time`, RFC 3339 (default: none)")
	fs.StringVar(&f.missed, "missed", "", "missed planned times: skip (default), catch_up or run_once")
	fs.StringVar(&f.overrun, "overrun", "", "planned times during a run: skip or queue (default: as missed)")
	durationVar(fs, &f.grace, "grace", "how late a planned time may start under skip (default 5s)")
	fs.IntVar(&f.priority, "priority", 0, "claim order: higher first")
	fs.IntVar(&f.concurrency, "concurrency", 0, "successful runs that complete the task (default 1)")
	fs.BoolVar(&f.distinct, "distinct-workers", false, "each success by a different worker")
	fs.Var(&f.workerIDs, "worker-ids", "comma-separated `ids` of the workers allowed (default: any)")
	fs.StringVar(&f.group, "group", "", "the worker `group` allowed (default: any)")
	durationVar(fs, &f.pingInterval, "ping-interval", "lease renewal period (default 10s)")
	durationVar(fs, &f.workerTimeout, "worker-timeout", "lease length (default 30s)")
	fs.IntVar(&f.maxRetries, "max-retries", 0, "local retries after a handler error, -1 for none (default 2)")
	durationVar(fs, &f.retryDelay, "retry-delay", "delay before the first local retry (default 1s)")
	fs.IntVar(&f.maxFailedRuns, "max-failed-runs", 0, "failed runs that fail the task (default 3)")
	durationVar(fs, &f.timeout, "timeout", "deadline of each handler attempt (default: the consumer's)")
	fs.StringVar(&f.description, "description", "", "what the task is, for people")
	fs.StringVar(&f.source, "source", "mscheduler command", "who published the task")
	fs.Var(&f.tags, "tags", "comma-separated `tags`")
	fs.BoolVar(&f.updateParams, "update-params", false, "if the key exists, replace its params")
	fs.BoolVar(&f.moveRunAt, "move-run-at", false, "if the key exists, move its run_at")
	fs.BoolVar(&f.resetFinished, "reset-finished", false, "if the key exists and is finished, make it pending again")
	fs.BoolVar(&f.create, "create", false, "create the collection if it does not exist (without it, a mistyped -c is an error)")
}

// task builds the task; its values are checked by the library, which
// names the field it refuses.
func (f *publishFlags) task(key string) (mscheduler.Task[bson.RawValue], error) {
	t := mscheduler.Task[bson.RawValue]{
		Key: key, RunAt: f.runAt, Priority: f.priority, Concurrency: f.concurrency, DistinctWorkers: f.distinct,
		WorkerIDs: f.workerIDs, Group: f.group, PingInterval: f.pingInterval, WorkerTimeout: f.workerTimeout,
		MaxRetries: f.maxRetries, RetryDelay: f.retryDelay, MaxFailedRuns: f.maxFailedRuns, Timeout: f.timeout,
		Description: f.description, Source: f.source, Tags: f.tags,
		Params: bson.RawValue{Type: bson.TypeNull},
	}
	if f.plan != "" && (f.in != 0 || !f.runAt.IsZero()) {
		return t, usageErrorf("publish: --run-at and --in do not go with --plan: the plan sets when it runs (see --start)")
	}
	if f.in < 0 {
		return t, usageErrorf("publish: --in must not be negative, got %s (give --run-at for a time in the past)", f.in)
	}
	if f.in != 0 {
		if !f.runAt.IsZero() {
			return t, usageErrorf("publish: give --run-at or --in, not both")
		}
		t.RunAt = time.Now().Add(f.in)
	}
	if f.params != "" {
		var wrapped bson.Raw
		if !json.Valid([]byte(f.params)) {
			return t, usageErrorf("publish: --params must be one JSON value, like '{\"to\":\"ada@example.com\"}'")
		}
		if err := bson.UnmarshalExtJSON([]byte(`{"v":`+f.params+`}`), false, &wrapped); err != nil {
			return t, usageErrorf("publish: --params must be JSON, like '{\"to\":\"ada@example.com\"}': %v", err)
		}
		t.Params = wrapped.Lookup("v")
	}
	if f.plan == "" {
		if f.zone != "" || f.repeat != 0 || !f.start.IsZero() || !f.end.IsZero() || f.missed != "" || f.overrun != "" || f.grace != 0 {
			return t, usageErrorf("publish: --zone, --repeat, --start, --end, --missed, --overrun and --grace need --plan")
		}
		return t, nil
	}
	p, err := parsePlan(f.plan)
	if err != nil {
		return t, usageErrorf("publish: --plan %v", err)
	}
	p.Zone, p.Start, p.End, p.Grace = f.zone, f.start, f.end, f.grace
	p.Missed, p.Overrun = mscheduler.MissedPolicy(f.missed), mscheduler.OverrunPolicy(f.overrun)
	if f.repeat != 0 {
		p.Repeat = f.repeat
	}
	t.Plan = &p
	return t, nil
}

func runPublish(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var f publishFlags
	f.register(fs)
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("publish", args, "KEY"); err != nil {
		return err
	}
	task, err := f.task(args[0])
	if err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	if !f.create {
		if err := c.mustExist(ctx); err != nil {
			return err
		}
	} else if err := c.creatable(); err != nil {
		return err
	}
	opts := &mscheduler.PublishOpts{UpdateParams: f.updateParams, MoveRunAt: f.moveRunAt, ResetFinished: f.resetFinished}
	res, err := c.producer.Publish(ctx, task, opts)
	if err != nil {
		return taskError("publish", task.Key, err)
	}
	switch res.Outcome {
	case mscheduler.PublishUnchanged:
		_, err = fmt.Fprintf(c.stdout, "%s exists and was left unchanged (see --update-params, --move-run-at, --reset-finished)\n", res.Key)
	default:
		_, err = fmt.Fprintf(c.stdout, "%s %s\n", res.Outcome, res.Key)
	}
	return err
}
