package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/dashboard"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

func runDashboard(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to serve on (loopback unless you say otherwise)")
	readOnly := fs.Bool("read-only", false, "hide and refuse every action; with no token set, none is made: the pages need none on loopback")
	var allowHosts hostList
	fs.Var(&allowHosts, "allow-host", "a host `name` the dashboard answers to besides the loopback names (repeat for more)")
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
		fmt.Fprintf(c.stderr, "no server set ($%s or --uri): starting the development server with demo tasks and a demo worker...\n", worker.EnvURI)
		startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
		s, err := devserver.Start(startCtx, devserver.Options{Stderr: c.stderr, Progress: func(msg string) { fmt.Fprintln(c.stderr, msg) }})
		cancel()
		if err != nil {
			return &opError{msg: fmt.Sprintf("dashboard: %v", err), err: err}
		}
		defer func() { _ = s.Stop() }()
		c.uri = s.URI()
		fmt.Fprintf(c.stderr, "development server at %s: point the command or mongosh at the demo data with %s=%s\n", c.uri, worker.EnvURI, c.uri)
		go func() {
			if err := runDemo(ctx, c.uri, c.db); err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.stderr, "mscheduler: dashboard: demo: %v\n", err)
			}
		}()
	}
	if err := c.connectDB(); err != nil {
		return err
	}
	token, made := os.Getenv(dashboard.EnvToken), false
	if token == "" && !*readOnly {
		token, made = newToken(), true
	}
	if name := dashboard.ListenName(*addr); name != "" {
		allowHosts = append(allowHosts, name)
	}
	cfg := &dashboard.Config{ReadOnly: *readOnly, AllowedHosts: allowHosts, Token: token}
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
	srv := dashboard.NewServer(d)
	base := fmt.Sprintf("http://%s/", browsable(ln.Addr()))
	if made {
		// Only a token made here is printed: one the user chose may
		// serve elsewhere, and terminals and logs keep what they show.
		fmt.Fprintf(c.stdout, "%s?token=%s\n", base, token)
	} else {
		fmt.Fprintln(c.stdout, base)
	}
	fmt.Fprintf(c.stderr, "dashboard of database %q serving on the address above; Ctrl-C stops it.\n", c.db)
	if made {
		fmt.Fprintf(c.stderr, "actions need the token in that link, made anew at each start; set $%s to keep one.\n", dashboard.EnvToken)
	}
	if !isLoopback(ln.Addr()) {
		if token == "" {
			fmt.Fprintf(c.stderr, "no token ($%s): the dashboard answers this machine only, whatever the address it listens on.\n", dashboard.EnvToken)
		} else {
			fmt.Fprintln(c.stderr, "listening beyond loopback: other machines reach the dashboard with its token, over plain HTTP; put TLS in front of it on a network you do not trust.")
		}
	}
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

// tokenBytes is the size of a token the command makes: 128 bits, beyond
// guessing through the network.
const tokenBytes = 16

// newToken makes a dashboard token for one run of the command.
func newToken() string {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b)
}

// hostList is a repeatable flag of host names.
type hostList []string

func (h *hostList) String() string     { return strings.Join(*h, ",") }
func (h *hostList) Set(v string) error { *h = append(*h, v); return nil }

// browsable is a listener's address as a browser on this machine reaches
// it: an unspecified address (0.0.0.0, ::) by the loopback one.
func browsable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
