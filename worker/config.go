package worker

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// Environment variables read by [Config] defaults.
const (
	// EnvURI names the environment variable that points workers, tests and
	// examples at a MongoDB server.
	EnvURI = "MONGODB_URI"
	// EnvDatabase names the environment variable with the default database.
	EnvDatabase = "MSCHEDULER_DB"
	// EnvHTTPAddr names the environment variable with the default HTTPAddr.
	EnvHTTPAddr = "MSCHEDULER_HTTP_ADDR"
)

// Defaults of [Config].
const (
	// DatabaseDefault is the database used when neither Config.Database nor
	// the MSCHEDULER_DB environment variable names one.
	DatabaseDefault = "mscheduler"
	// ShutdownTimeoutDefault is how long running handlers may go on after a
	// stop is requested.
	ShutdownTimeoutDefault = 30 * time.Second
	// HeartbeatIntervalDefault is how often a worker renews its document in
	// the worker registry.
	HeartbeatIntervalDefault = 10 * time.Second
)

// Config configures a [Worker]. The zero value is ready to use when the
// MONGODB_URI environment variable is set.
type Config struct {
	// URI is the MongoDB connection string. Defaults to the MONGODB_URI
	// environment variable ([EnvURI]). When it is empty after that, DevServer
	// decides what happens.
	URI string
	// Database holds the task collections. Defaults to the MSCHEDULER_DB
	// environment variable ([EnvDatabase]), else [DatabaseDefault].
	Database string
	// WorkerID names this worker process in the task documents; it is the
	// default WorkerID of every registered consumer. It must not contain '.'
	// or start with '$'. Defaults to [mscheduler.DefaultWorkerID]
	// (host-pid-8 hex digits).
	WorkerID string
	// Groups are the worker groups of this process, the default Groups of
	// every registered consumer. Defaults to none.
	Groups []string
	// Logger receives the worker's logs and, unless a consumer config sets
	// its own, the consumers' logs. Defaults to a JSON handler on stderr at
	// level Info.
	Logger *slog.Logger
	// ShutdownTimeout is how long running handlers may go on after Run's
	// context is done or SIGINT/SIGTERM arrives. Past it their contexts are
	// cancelled (cause [mscheduler.ErrShutdown]) and their runs are released
	// so that other workers can claim them at once; a handler that ignores
	// its context is abandoned after the consumer's ReleaseTimeout more.
	// Must not be negative. Defaults to [ShutdownTimeoutDefault].
	ShutdownTimeout time.Duration
	// SkipIndexes stops Run from creating the indexes of the registered
	// collections ([mscheduler.EnsureIndexes]); something else must create
	// them first: a producer, a migration step, or one designated worker.
	// Use it where the workers' database user may not create indexes.
	SkipIndexes bool
	// HTTPAddr, when set, makes Run serve Prometheus metrics (/metrics),
	// liveness (/healthz: the process is up) and readiness (/readyz: the
	// server answered a ping within 2 s) on this address, such as
	// "127.0.0.1:9100" (":0" picks a free port; see Worker.HTTPAddr).
	// Defaults to the MSCHEDULER_HTTP_ADDR environment variable
	// ([EnvHTTPAddr]); empty serves nothing.
	HTTPAddr string
	// HeartbeatInterval is how often the worker renews its document in the
	// worker registry (mscheduler.ListWorkers); it is reported stale after
	// 3 intervals without one. Defaults to [HeartbeatIntervalDefault].
	HeartbeatInterval time.Duration
	// Dashboard, when set with HTTPAddr, also serves the web dashboard
	// (package worker/dashboard) of the worker's database under
	// /dashboard/ on that listener. It is read-only, and answers this
	// machine alone, unless it has a Token (or MSCHEDULER_DASHBOARD_TOKEN
	// is set): a metrics listener is often open to the network, and acting
	// takes credentials even on loopback. With a token it acts unless it
	// is ReadOnly, and a browser logs in by /dashboard/?token=<token>.
	// Defaults to nil: no dashboard.
	Dashboard *dashboard.Config
	// DevServer, when URI is empty (after its default), makes New start the
	// development server (package worker/devserver, built from a checkout of
	// the repository) and Run stop it at the end. Without it an empty URI is
	// an error. It is for development only: the server's data lives in a
	// temporary directory removed when it stops.
	DevServer bool
}

func (c Config) withDefaults() Config {
	c.URI = cmp.Or(c.URI, os.Getenv(EnvURI))
	c.Database = cmp.Or(c.Database, os.Getenv(EnvDatabase), DatabaseDefault)
	if c.WorkerID == "" {
		c.WorkerID = mscheduler.DefaultWorkerID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.HTTPAddr = cmp.Or(c.HTTPAddr, os.Getenv(EnvHTTPAddr))
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	return c
}

// validate checks a config after withDefaults. It does no I/O: the URI is
// parsed in full by New.
func (c Config) validate() error {
	switch {
	case c.URI == "" && !c.DevServer:
		return invalid("URI", "must be set, or the %s environment variable, or DevServer to start the development server", EnvURI)
	case c.URI != "" && !strings.HasPrefix(c.URI, "mongodb://") && !strings.HasPrefix(c.URI, "mongodb+srv://"):
		return invalid("URI", "must start with mongodb:// or mongodb+srv://")
	}
	if err := validateDatabase(c.Database); err != nil {
		return err
	}
	if err := mscheduler.ValidateWorkerID(c.WorkerID); err != nil {
		return invalid("WorkerID", "%s", reason(err))
	}
	for i, g := range c.Groups {
		if g == "" {
			return invalid(fmt.Sprintf("Groups[%d]", i), "must not be empty")
		}
	}
	if c.ShutdownTimeout < 0 {
		return invalid("ShutdownTimeout", "must not be negative, got %s", c.ShutdownTimeout)
	}
	if c.HeartbeatInterval < 0 {
		return invalid("HeartbeatInterval", "must not be negative, got %s", c.HeartbeatInterval)
	}
	return nil
}

// validateDatabase applies MongoDB's rules for database names.
func validateDatabase(name string) error {
	switch {
	case name == "":
		return invalid("Database", "must not be empty")
	case len(name) >= 64:
		return invalid("Database", "must be shorter than 64 bytes, got %d", len(name))
	case strings.ContainsAny(name, "/\\. \"$*<>:|?\x00"):
		return invalid("Database", "must not contain any of /\\. \"$*<>:|? or NUL, got %q", name)
	}
	return nil
}

// invalidError is a *mscheduler.InvalidError reported by this package: it
// matches errors.Is(err, mscheduler.ErrInvalid), errors.As finds the
// *mscheduler.InvalidError with the field's name, and its message says
// which package refused the input.
type invalidError struct {
	*mscheduler.InvalidError
}

func (e invalidError) Error() string {
	return fmt.Sprintf("worker: invalid %s: %s", e.Field, e.Reason)
}

func (e invalidError) Unwrap() error { return e.InvalidError }

func invalid(field, format string, args ...any) error {
	return invalidError{&mscheduler.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}}
}

// reason is the reason of an *mscheduler.InvalidError, or its message.
func reason(err error) string {
	if ie, ok := err.(*mscheduler.InvalidError); ok {
		return ie.Reason
	}
	return err.Error()
}
