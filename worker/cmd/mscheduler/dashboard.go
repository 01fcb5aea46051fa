package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/dashboard"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

func runDashboard(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to serve on (loopback unless you say otherwise)")
	readOnly := fs.Bool("read-only", false, "hide and refuse every action")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("dashboard", args); err != nil {
		return err
	}
	c.globals.withDefaults()
	if c.uri == "" {
		// No server named: show a populated, live page on the
		// development server.
		fmt.Fprintf(c.stderr, "no server set ($%s or --uri): starting the development server with demo tasks and a demo worker (the first build takes a minute or two)...\n", worker.EnvURI)
		startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
		s, err := devserver.Start(startCtx, devserver.Options{Stderr: c.stderr})
		cancel()
		if err != nil {
			return &opError{msg: fmt.Sprintf("dashboard: %v", err), err: err}
		}
		defer func() { _ = s.Stop() }()
		c.uri = s.URI()
		go func() {
			if err := runDemo(ctx, c.uri, c.db); err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.stderr, "mscheduler: dashboard: demo: %v\n", err)
			}
		}()
	}
	if err := c.connectDB(); err != nil {
		return err
	}
	cfg := &dashboard.Config{ReadOnly: *readOnly}
	if c.collection != "" {
		cfg.Collections = []string{c.collection}
	}
	d, err := dashboard.New(c.client.Database(c.db), cfg)
	if err != nil {
		return usageErrorf("%v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return &opError{msg: fmt.Sprintf("dashboard: listen on %s: %v", *addr, err), err: err}
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.stdout, "http://%s/\n", ln.Addr())
	fmt.Fprintf(c.stderr, "dashboard of database %q serving on the address above; Ctrl-C stops it.\n", c.db)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return &opError{msg: fmt.Sprintf("dashboard: %v", err), err: err}
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return &opError{msg: fmt.Sprintf("dashboard: %v", err), err: err}
	}
	return nil
}
