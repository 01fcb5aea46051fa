package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/worker/devserver"
)

// devStartTimeout bounds the first build and start of the development
// server.
const devStartTimeout = 15 * time.Minute

func runDev(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	addr := fs.String("addr", "127.0.0.1:27017", "the `address` to listen on")
	dir := fs.String("data", "", "keep the data in this `directory` (default: a temporary one, removed on exit)")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("dev", args); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "starting the development server...\n")
	startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
	s, err := devserver.Start(startCtx, devserver.Options{Addr: *addr, Dir: *dir, Stderr: c.stderr, Progress: func(msg string) { fmt.Fprintln(c.stderr, msg) }})
	cancel()
	if err != nil {
		return &opError{msg: fmt.Sprintf("dev: %v", err), err: err}
	}
	fmt.Fprintf(c.stdout, "%s\n", s.URI())
	fmt.Fprintf(c.stderr, "development server listening; connect mongosh or Compass to the URI above, or\n  export MONGODB_URI=%s\nCtrl-C stops it.\n", s.URI())
	<-ctx.Done()
	return s.Stop()
}
