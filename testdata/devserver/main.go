// Command devserver is the MongoDB-compatible development server of mscheduler's tests and
// examples: an embedded FerretDB v1.24 (SQLite or PostgreSQL storage) behind a front that
// forwards one command at a time, so that single-document writes are atomic as on MongoDB.
//
// Usage:
//
//	devserver -dir DATA [-listen 127.0.0.1:27017] [-handler sqlite|postgresql -postgresql-url URL]
//	          [-no-change-streams] [-change-stream-history N] [-lock-report 10s] [-lock-report-shapes] [-log-level error]
//
// Once the server answers a ping it prints exactly one line to stdout,
//
//	devserver listening on mongodb://127.0.0.1:PORT/
//
// and serves until SIGINT or SIGTERM. The front also emulates change streams, which FerretDB
// lacks (see README.md); -no-change-streams turns them off. Logs go to stderr: the front's warnings and errors, and
// FerretDB's errors only (see -log-level).
//
// This is a module of its own so that the library's go.mod never depends on FerretDB.
// FerretDB is embedded through its github.com/FerretDB/FerretDB/ferretdb package; its own
// cmd/ferretdb cannot be used from the module proxy (`go install` is refused, and a build of it
// panics at start-up because build/version/version.txt is not in the module zip). The embedded
// package needs no version file and no build tags: build/version skips version.txt when the main
// module is not FerretDB's. Tags that do matter, none of which is wanted here: ferretdb_debug
// (debug behaviour, also implied by -race), ferretdb_no_sqlite, ferretdb_no_postgresql.
// Telemetry is off: the embedded package disables and locks it itself (ferretdb.New).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// envLockReport gives -lock-report its default, so that a test's server can report.
const envLockReport = "MSCHEDULER_DEV_LOCK_REPORT"

// envLockReportShapes, when not empty, gives -lock-report-shapes its default.
const envLockReportShapes = "MSCHEDULER_DEV_LOCK_REPORT_SHAPES"

// readyTimeout bounds how long start-up may take before the server gives up.
const readyTimeout = 30 * time.Second

type config struct {
	listen        string
	dir           string
	handler       string
	postgreSQLURL string
	logLevel      slog.Level // FerretDB's; the front always logs warnings

	noChangeStreams  bool          // serve no change streams: $changeStream fails as on bare FerretDB
	lockReport       time.Duration // how often to log the lock report; 0: never
	lockReportShapes bool          // the report's kinds name their filters' fields
	streams          streamConfig
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(2)
	}

	if percent, ok := gcPercent(os.Getenv); ok {
		debug.SetGCPercent(percent)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
}

// gcPercentDefault is the garbage collector's target unless GOGC says otherwise. FerretDB decodes
// every document a query scans into new maps, and at Go's default of 100 collecting them took
// about a fifth of the server's time: a sorted find over 412 small tasks answered in 57 ms
// (p50) at 100 and in 41 ms at 400, for a heap of a few tens of megabytes more.
const gcPercentDefault = 400

// gcPercent is the target to set, and true, when GOGC is not set.
func gcPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return gcPercentDefault, true
}

func parseFlags(args []string) (config, error) {
	var cfg config

	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:27017", "`address` to serve MongoDB clients on; port 0 picks a free port")
	fs.StringVar(&cfg.dir, "dir", "", "data `directory` (required; created if missing)")
	fs.StringVar(&cfg.handler, "handler", "sqlite", "FerretDB storage: sqlite or postgresql")
	fs.StringVar(&cfg.postgreSQLURL, "postgresql-url", "", "PostgreSQL `URL` for -handler postgresql")
	fs.BoolVar(&cfg.noChangeStreams, "no-change-streams", false, "serve no change streams ($changeStream fails, as on a standalone server)")
	fs.DurationVar(&cfg.lockReport, "lock-report", 0,
		"log every `interval` how long each kind of command held the front's lock (0: never; defaults to $"+envLockReport+")")
	fs.BoolVar(&cfg.lockReportShapes, "lock-report-shapes", false,
		"tell the kinds of commands in the lock report apart by the fields their filters test (defaults to $"+envLockReportShapes+" being set)")
	cfg.streams = defaultStreamConfig()
	fs.IntVar(&cfg.streams.historySize, "change-stream-history", cfg.streams.historySize,
		"how many `changes` the change streams keep for resuming; older tokens fail with ChangeStreamHistoryLost")

	// FerretDB logs every failed command at warn level with the whole message, including the
	// endSessions (CommandNotFound) that every driver sends on disconnect, so errors only by
	// default. -log-level warn shows failed commands, debug every request and reply.
	cfg.logLevel = slog.LevelError
	fs.TextVar(&cfg.logLevel, "log-level", cfg.logLevel, "FerretDB's log `level`: debug, info, warn or error")

	if err := fs.Parse(args); err != nil {
		return cfg, err
	}

	if err := lockReportFromEnv(fs, &cfg); err != nil {
		return cfg, err
	}

	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	if cfg.dir == "" {
		return cfg, errors.New("-dir is required")
	}

	if cfg.lockReport < 0 {
		return cfg, fmt.Errorf("-lock-report must not be negative, not %s", cfg.lockReport)
	}

	if cfg.streams.historySize < 1 {
		return cfg, fmt.Errorf("-change-stream-history must be at least 1, not %d", cfg.streams.historySize)
	}

	switch cfg.handler {
	case "sqlite":
	case "postgresql":
		if cfg.postgreSQLURL == "" {
			return cfg, errors.New("-handler postgresql needs -postgresql-url")
		}
	default:
		return cfg, fmt.Errorf("-handler must be sqlite or postgresql, not %q", cfg.handler)
	}

	return cfg, nil
}

// lockReportFromEnv sets cfg.lockReport from $MSCHEDULER_DEV_LOCK_REPORT unless -lock-report was
// given, and cfg.lockReportShapes from $MSCHEDULER_DEV_LOCK_REPORT_SHAPES unless
// -lock-report-shapes was.
func lockReportFromEnv(fs *flag.FlagSet, cfg *config) error {
	given, shapesGiven := false, false
	fs.Visit(func(f *flag.Flag) {
		given = given || f.Name == "lock-report"
		shapesGiven = shapesGiven || f.Name == "lock-report-shapes"
	})
	if !shapesGiven && os.Getenv(envLockReportShapes) != "" {
		cfg.lockReportShapes = true
	}
	v := os.Getenv(envLockReport)
	if given || v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("$%s: %w", envLockReport, err)
	}
	cfg.lockReport = d
	return nil
}

// run serves until ctx is done. It announces the address on stdout once the server answers.
func run(ctx context.Context, cfg config, stdout io.Writer) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dbLogger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	db, err := newFerretDB(cfg, dbLogger)
	if err != nil {
		return err
	}

	// FerretDB already listens (ferretdb.New binds), so its address is known now.
	backendURI, err := url.Parse(db.MongoDBURI())
	if err != nil {
		return fmt.Errorf("parse FerretDB address: %w", err)
	}

	// FerretDB gets its own context and stops after the front: by then every backend
	// connection is closed, so it does not wait for clients to go away.
	dbCtx, stopDB := context.WithCancel(context.Background())
	var dbWG sync.WaitGroup
	dbWG.Go(func() { _ = db.Run(dbCtx) })
	defer func() {
		stopDB()
		dbWG.Wait()
	}()

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}

	frontCtx, stopFront := context.WithCancel(ctx)
	defer stopFront()

	var streams *streamConfig
	if !cfg.noChangeStreams {
		streams = &cfg.streams
	}
	f := newFront(backendURI.Host, logger, streams)
	if cfg.lockReport > 0 {
		f.locks, f.locksEvery = &lockReport{shapes: cfg.lockReportShapes}, cfg.lockReport
	}
	served := make(chan error, 1)
	go func() { served <- f.serve(frontCtx, ln) }()

	addr := dialAddr(ln.Addr().(*net.TCPAddr))

	if err := waitReady(frontCtx, addr); err != nil {
		stopFront()
		<-served
		return err
	}

	if _, err := fmt.Fprintf(stdout, "devserver listening on mongodb://%s/\n", addr); err != nil {
		stopFront()
		<-served
		return fmt.Errorf("announce address: %w", err)
	}

	return <-served
}

// newFerretDB configures an embedded FerretDB listening on a free loopback port.
func newFerretDB(cfg config, logger *slog.Logger) (*ferretdb.FerretDB, error) {
	fc := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:   logger,
		Handler:  cfg.handler,
	}

	switch cfg.handler {
	case "sqlite":
		dir, err := filepath.Abs(cfg.dir)
		if err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}

		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}

		// A directory is the whole SQLite database; FerretDB wants it as a file: URI ending in "/".
		// Building it with url.URL escapes characters such as '?' or '#' in the path.
		fc.SQLiteURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir) + "/"}).String()

	case "postgresql":
		// The data directory is still required and created, for symmetry and for callers that
		// keep files next to the server, but PostgreSQL holds the data.
		if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}

		u, err := withPoolDefaults(cfg.postgreSQLURL)
		if err != nil {
			return nil, err
		}
		fc.PostgreSQLURL = u
	}

	db, err := ferretdb.New(fc)
	if err != nil {
		return nil, fmt.Errorf("start FerretDB: %w", err)
	}

	return db, nil
}

// dialAddr is the address clients should dial for a listener's address: an unspecified host
// (":27017", "0.0.0.0:27017") is reached through loopback.
func dialAddr(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}

	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// waitReady pings the server through the front until it answers, so that the announcement
// means that the whole path (front, FerretDB, storage) works.
func waitReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	for {
		err := ping(ctx, addr)
		if err == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("server did not answer a ping: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withPoolDefaults sizes FerretDB's PostgreSQL pool for batches, unless the URL sizes it. FerretDB
// 1.24 keeps each statement of an update command reading from its own pool connection until the
// command ends, so a command of more statements than the pool has connections (50 by default)
// waits forever for one, and behind the front every other command waits with it. Idle
// connections are closed soon, so that several servers on one PostgreSQL stay within its
// max_connections.
func withPoolDefaults(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("-postgresql-url: %w", err)
	}
	q := u.Query()
	if !q.Has("pool_max_conns") {
		q.Set("pool_max_conns", strconv.Itoa(postgreSQLPoolSize))
	}
	if !q.Has("pool_max_conn_idle_time") {
		q.Set("pool_max_conn_idle_time", "10s")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// postgreSQLPoolSize bounds the statements of one update command on PostgreSQL storage: more
// than a consumer's batches hold (ClaimBatchMax is 64; a ping batch has a statement per run).
const postgreSQLPoolSize = 250
