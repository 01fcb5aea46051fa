package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
)

// runWork serves the collection from this process, as a worker process
// would: each run executes a shell command (see shellHandler). It is the
// way to try the other commands against tasks that actually run, and a
// worker for jobs that are scripts.
func runWork(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	var groups listFlag
	command := fs.String("exec", "", "the shell `command` each run executes with sh -c (required): params as JSON on stdin, stdout is the result, a non-zero exit fails the attempt")
	capacity := fs.Int("capacity", mscheduler.CapacityDefault, "runs at once")
	workerID := fs.String("worker-id", "", "this worker's `id` in the task documents (default: host-pid-random)")
	fs.Var(&groups, "groups", "comma-separated worker `groups` of this worker (default: none)")
	shutdown := worker.ShutdownTimeoutDefault
	durationVar(fs, &shutdown, "shutdown-timeout", "at Ctrl-C, how long runs going may go on before their commands get SIGTERM")
	quiet := fs.Bool("quiet", false, "log warnings and errors only (failed runs are warnings)")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("work", args); err != nil {
		return err
	}
	switch {
	case *command == "":
		return usageErrorf("work: --exec is required, like --exec 'cat' (the params back as the result)")
	case *capacity < 1:
		return usageErrorf("work: --capacity must be at least 1, got %d", *capacity)
	case shutdown < 0:
		return usageErrorf("work: --shutdown-timeout must not be negative, got %s", shutdown)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		return &opError{msg: "work: --exec runs its command with sh, which is not on PATH", err: err}
	}
	if err := c.open(ctx); err != nil {
		return err
	}
	c.disconnect() // the worker has its own client
	c.client = nil
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelWarn
	}
	w, err := worker.New(ctx, worker.Config{
		URI: c.uri, Database: c.db, WorkerID: *workerID, Groups: groups, ShutdownTimeout: shutdown,
		Logger: slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return workError(err)
	}
	h := shellHandler{command: *command, collection: c.collection}
	if err := worker.Register(w, c.collection, h.run, &mscheduler.ConsumerConfig{Capacity: *capacity}); err != nil {
		_ = w.Close()
		return workError(err)
	}
	fmt.Fprintf(c.stderr, "serving %s.%s as worker %s with %d slot%s; Ctrl-C stops\n", c.db, c.collection, w.ID(), *capacity, plural(*capacity))
	stopping := context.AfterFunc(ctx, func() {
		fmt.Fprintf(c.stderr, "stopping: runs going may end within %s (--shutdown-timeout); then their commands get SIGTERM, and their runs are released\n", shutdown)
	})
	defer stopping()
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return workError(err)
	}
	return nil
}

// workError is a failure of the worker, named as the command's.
func workError(err error) error {
	var invalid *mscheduler.InvalidError
	if errors.As(err, &invalid) && invalid.Field == "WorkerID" {
		return usageErrorf("work: --worker-id: %s", invalid.Reason)
	}
	return &opError{msg: "work: " + err.Error(), err: err}
}

// workStopGrace is how long a shell command may go on after its run is
// cancelled (SIGTERM) before it is killed: shorter than the consumer's
// ReleaseTimeout, past which a handler still going is abandoned.
const workStopGrace = 3 * time.Second

// The result a command prints must fit a task document with room to spare.
const (
	maxWorkOutput = 1 << 20
	maxWorkErrors = 4 << 10
)

// ensure the handler's shape is the library's.
var _ mscheduler.Handler[bson.RawValue, bson.RawValue] = shellHandler{}.run
