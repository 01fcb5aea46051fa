package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/devserver"
	"github.com/mscheduler/mscheduler/worker/gateway"
	"github.com/mscheduler/mscheduler/worker/internal/webguard"
)

// gatewayShutdownTimeout bounds the requests going on at Ctrl-C: ends of
// runs being written, publishes. Takes waiting for work end at once.
const gatewayShutdownTimeout = 10 * time.Second

// gatewayStopTimeout bounds the writes of the ends of the runs released at
// Ctrl-C.
const gatewayStopTimeout = 10 * time.Second

// runGateway serves the HTTP gateway (worker/gateway) for the database:
// executors in any language take and end runs of the tasks of its
// collections, which each URL names.
func runGateway(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	addr := fs.String("addr", "127.0.0.1:8090", "the `address` to serve on (loopback unless you say otherwise; beyond it, --tokens is required)")
	tokensFile := fs.String("tokens", "", `a JSON `+"`file`"+` of the executors' bearer tokens, {"<token>": {"executor": "ID", "groups": ["g", ...]}, ...}; tokens have 16 characters or more (default: none, and only this machine is served, its executors naming themselves)`)
	var allowHosts hostList
	fs.Var(&allowHosts, "allow-host", "a host `name` the gateway answers to besides localhost and IP addresses (repeat for more)")
	capacity := fs.Int("capacity", gateway.CapacityDefault, "the most runs one executor holds at once in one collection, with it or waiting for it")
	collections := fs.String("collections", "", "the task `collections` to serve, comma-separated (default: the one -c names); requests naming another are answered 404")
	create := fs.Bool("create", false, "create the collections that do not exist yet, as migrate --create does (without it, a mistyped name is an error)")
	workerID := fs.String("worker-id", "", "the gateway's `id`: the worker registry shows its executors as served through it, their runs held under their own ids (default: the host name and -gateway)")
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("gateway", args); err != nil {
		return err
	}
	if *capacity < 1 {
		return usageErrorf("gateway: --capacity must be at least 1, got %d", *capacity)
	}
	id := *workerID
	if id == "" {
		id = defaultGatewayID()
	} else if err := mscheduler.ValidateWorkerID(id); err != nil {
		return usageErrorf("gateway: --worker-id: %s", reasonOf(err))
	}
	var tokens map[string]gateway.Executor
	if *tokensFile != "" {
		if tokens, err = readTokens(*tokensFile); err != nil {
			return usageErrorf("gateway: --tokens %s: %v", *tokensFile, err)
		}
	}
	for _, h := range allowHosts {
		if h == "" || strings.ContainsAny(h, "/:@ \t[]") {
			return usageErrorf("gateway: --allow-host %q: give a host name, without scheme, port or path", h)
		}
	}
	if name := webguard.ListenName(*addr); name != "" {
		allowHosts = append(allowHosts, name)
	}
	if len(tokens) == 0 && beyondLoopback(*addr) {
		return tokensNeeded(*addr)
	}
	served, err := servedCollections(*collections, c.collection)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return &opError{msg: fmt.Sprintf("gateway: listen on %s: %v", *addr, err), err: err}
	}
	defer ln.Close()
	if len(tokens) == 0 && !isLoopback(ln.Addr()) { // a name that is not this machine's
		return tokensNeeded(*addr)
	}

	c.globals.withDefaults()
	if c.uri == "" {
		// No server named: the development server, so that a first try
		// needs nothing installed.
		fmt.Fprintf(c.stderr, "no server set ($%s or --uri): starting the development server...\n", worker.EnvURI)
		startCtx, cancel := context.WithTimeout(ctx, devStartTimeout)
		s, err := devserver.Start(startCtx, devserver.Options{Stderr: c.stderr, Progress: func(msg string) { fmt.Fprintln(c.stderr, msg) }})
		cancel()
		if err != nil {
			return &opError{msg: fmt.Sprintf("gateway: %v", err), err: err}
		}
		defer func() { _ = s.Stop() }()
		c.uri = s.URI()
		fmt.Fprintf(c.stderr, "development server at %s (--create makes the collections to serve there); point other commands at it with\n  %s=%s\n", c.uri, worker.EnvURI, c.uri)
	}
	if err := c.connectDB(); err != nil {
		return err
	}
	// A wrong URI is told now, not at each request.
	if err := c.client.Ping(ctx, nil); err != nil {
		return err
	}
	if err := c.prepareServed(ctx, served, *create); err != nil {
		return err
	}
	gw, err := gateway.New(c.client.Database(c.db), &gateway.Config{
		Collections: served,
		Tokens:      tokens, WorkerID: id, Capacity: *capacity, AllowedHosts: allowHosts,
		Logger: slog.New(slog.NewTextHandler(c.stderr, nil)),
	})
	if err != nil {
		return usageErrorf("gateway: %s", strings.TrimPrefix(err.Error(), "gateway: "))
	}
	srv := gateway.NewServer(gw)
	base := "http://" + browsable(ln.Addr())
	coll := "<collection>"
	if len(served) == 1 {
		coll = url.PathEscape(served[0])
	}
	fmt.Fprintf(c.stdout, "gateway at %s/v1/collections/%s/… (OpenAPI at %s/openapi.json)\n", base, coll, base)
	fmt.Fprintf(c.stderr, "gateway of database %q serving the task collections %s on the address above; Ctrl-C stops it.\n", c.db, strings.Join(served, ", "))
	switch {
	case len(tokens) == 0:
		fmt.Fprintln(c.stderr, "no --tokens: this machine's executors only, naming themselves in their requests.")
	case !isLoopback(ln.Addr()):
		fmt.Fprintln(c.stderr, "listening beyond loopback: executors reach the gateway with their tokens, over plain HTTP; put TLS in front of it on a network you do not trust.")
	}

	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var serveErr error
	select {
	case err := <-done:
		serveErr = &opError{msg: fmt.Sprintf("gateway: %v", err), err: err}
	case <-ctx.Done():
		fmt.Fprintln(c.stderr, "stopping: takes waiting end now, requests going on may end; then the runs executors hold are released.")
	}
	// Takes waiting end at once (see gateway.NewServer); the requests
	// going on get gatewayShutdownTimeout, then their connections close.
	shutdown, cancel := context.WithTimeout(context.Background(), gatewayShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
		if serveErr == nil {
			serveErr = &opError{msg: fmt.Sprintf("gateway: requests still going after %s were cut: %v", gatewayShutdownTimeout, err), err: err}
		}
	}
	// With the server down, no executor can end its runs: Stop releases
	// those they hold at once, so that others claim them without waiting
	// for their leases to lapse, and waits for the ends to be written.
	stop, cancelStop := context.WithTimeout(context.Background(), gatewayStopTimeout)
	defer cancelStop()
	if err := gw.Stop(stop); err != nil && serveErr == nil {
		serveErr = &opError{msg: fmt.Sprintf("gateway: stop: %v", err), err: err}
	}
	return serveErr
}

// servedCollections are the collections --collections names, or -c's.
func servedCollections(list, collection string) ([]string, error) {
	if list == "" {
		list = collection
	}
	if list == "" {
		return nil, usageErrorf("gateway: name the task collections to serve: -c NAME, or --collections A,B")
	}
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if err := mscheduler.CheckTaskCollectionName(name); err != nil {
			return nil, usageErrorf("gateway: --collections: %s", strings.TrimPrefix(err.Error(), "mscheduler: "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// prepareServed checks, before anything is served, that each collection
// to serve is a task collection, and creates those missing with create.
func (c *cli) prepareServed(ctx context.Context, served []string, create bool) error {
	db := c.client.Database(c.db)
	for _, name := range served {
		exists, err := c.exists(ctx, name)
		if err != nil {
			return err
		}
		switch {
		case !exists && !create:
			return &opError{msg: fmt.Sprintf("gateway: collection %q does not exist in database %q (check -c, --collections and --db; --create makes it)", name, c.db)}
		case !exists:
			err = mscheduler.EnsureIndexes(ctx, db.Collection(name))
		default:
			err = mscheduler.CheckTaskCollection(ctx, db.Collection(name))
		}
		if err != nil {
			return libraryError("gateway", err)
		}
	}
	return nil
}

// defaultGatewayID is the gateway's worker id when --worker-id is not
// given: the host name, whose dots a worker id cannot hold, and -gateway.
func defaultGatewayID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "mscheduler"
	}
	return strings.NewReplacer(".", "-", "$", "-", "\x00", "").Replace(host) + "-gateway"
}

// reasonOf is a library refusal's reason, or the error.
func reasonOf(err error) string {
	var invalid *mscheduler.InvalidError
	if errors.As(err, &invalid) {
		return invalid.Reason
	}
	return err.Error()
}

// beyondLoopback says an address to listen on is not this machine's alone,
// as far as it tells without resolving a name: all interfaces, or an IP
// address that is not loopback.
func beyondLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // net.Listen says what is wrong with it
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && !ip.IsLoopback()
}

func tokensNeeded(addr string) error {
	return usageErrorf("gateway: --addr %s is beyond loopback, but without --tokens the gateway serves this machine's peers only: give --tokens FILE for executors on other machines, or listen on 127.0.0.1", addr)
}

// tokenEntry is what a token speaks for, in the --tokens file.
type tokenEntry struct {
	Executor string   `json:"executor"`
	Groups   []string `json:"groups"`
}

// readTokens reads a --tokens file. Its errors never quote a token.
func readTokens(name string) (map[string]gateway.Executor, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var entries map[string]*tokenEntry
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf(`not a JSON object of tokens, {"<token>": {"executor": "ID", "groups": ["g", ...]}, ...}: %v`, err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if len(entries) == 0 {
		return nil, errors.New("no tokens: give at least one, or leave --tokens out to serve this machine only")
	}
	tokens := make(map[string]gateway.Executor, len(entries))
	for token, e := range entries {
		switch {
		case e == nil || e.Executor == "":
			return nil, errors.New(`a token has no "executor": give each one {"executor": "ID"}`)
		case len(token) < 16:
			return nil, fmt.Errorf("a token of executor %q has %d characters, want 16 or more", e.Executor, len(token))
		case strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
			return nil, fmt.Errorf("a token of executor %q has a space or a character beyond printable ASCII, which an Authorization header does not carry", e.Executor)
		}
		if err := mscheduler.ValidateWorkerID(e.Executor); err != nil {
			return nil, fmt.Errorf("executor %q: %s", e.Executor, reasonOf(err))
		}
		for _, g := range e.Groups {
			// A group names a document of the collection's metadata
			// (its consumers of that set of groups), in an update path.
			if g == "" || strings.ContainsAny(g, ".\x00") {
				return nil, fmt.Errorf("executor %q: group %q: a group here must not be empty or hold '.' or NUL", e.Executor, g)
			}
		}
		tokens[token] = gateway.Executor{ID: e.Executor, Groups: e.Groups}
	}
	return tokens, nil
}
