package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the operation failed
	exitUsage = 2 // the command line was wrong
)

// connectTimeoutDefault bounds the search for a server, so that a wrong URI
// ends in an error instead of the driver's 30 s wait.
const connectTimeoutDefault = 5 * time.Second

func main() {
	// Ctrl-C, or a service manager's stop: both end the command cleanly
	// (the dashboard's demo worker and development server with it).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand. Its run parses its own flags from args (the
// arguments after its name) with fs, on which the global flags are already
// registered.
type command struct {
	name     string
	synopsis string // its arguments, for the usage
	summary  string
	run      func(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error
}

// commands is set in init: the commands print the usage, which lists them.
var commands []command

func init() {
	commands = []command{
		{"list", "[--tag T]... [--status S]... [--group G] [--from T] [--before T] [--sort key|run_at|priority] [--limit N] [--after KEY] [--json]", "list tasks, by key or by --sort", runList},
		{"show", "KEY [--full] [--json]", "show one task", runShow},
		{"publish", "KEY [--create] [--params JSON] [--run-at T | --in D] [--plan SPEC] [options]", "publish a task (--create: into a new collection)", runPublish},
		{"update", "KEY [update flags]", "change the options and metadata of a task", runUpdate},
		{"pause", "KEY", "stop new runs of a task; runs going on finish", runPause},
		{"resume", "KEY", "let a paused task run again", runResume},
		{"skip", "KEY N", "skip the next N planned times of a task's plan (0 cancels)", runSkip},
		{"cancel", "KEY", "cancel a task and the runs it has going", runCancel},
		{"retry", "KEY", "make a failed, cancelled or invalid task run again now", runRetry},
		{"run-now", "KEY", "make a pending task (or a plan's current planned time) due now", runRunNow},
		{"delete", "KEY [--force]", "delete a task (--force: even with runs going, cancelling them)", runDelete},
		{"history", "[KEY] [--outcome O] [--worker W] [--since T] [--until T] [--limit N] [--after C] [--json]", "list finished runs, newest first", runHistory},
		{"wait", "KEY [--timeout D] [--json]", "wait until a task ends; exit 1 unless it succeeded", runWait},
		{"stats", "[--json]", "count tasks by status, the oldest waiting, runs and failures of the last hour", runStats},
		{"workers", "[--json]", "list the worker processes, live and stale", runWorkers},
		{"params-schema", "[--set FILE | --remove]", "show, set or remove the JSON Schema that published params must satisfy", runParamsSchema},
		{"migrate", "[--create] [--adopt]", "bring the collection to this build's schema version and create its indexes; --adopt marks one whose metadata was lost", runMigrate},
		{"work", "--exec CMD [--capacity N] [--worker-id ID] [--groups G,...] [--shutdown-timeout D] [--quiet]", "serve the collection from here: each run executes a shell command", runWork},
		{"dashboard", "[--addr A] [--read-only] [--allow-host NAME]", "serve the web dashboard (with no server set: the development server with demo tasks)", runDashboard},
		{"gateway", "[--collections A,B] [--create] [--addr A] [--tokens FILE] [--allow-host NAME]... [--capacity N] [--worker-id ID]", "serve the HTTP gateway through which executors in any language take and end runs of the collections given (with no server set: on the development server)", runGateway},
		{"dev", "[--addr A] [--data DIR]", "run the development server for mongosh, Compass and the examples", runDev},
		{"completion", "bash|zsh|fish", "print the shell's completion script, to load as in source <(mscheduler completion bash)", runCompletion},
		{"version", "", "print the version", runVersion},
	}
}

// cli is one invocation: its outputs, global flags and, once connected,
// its producer.
type cli struct {
	stdout, stderr io.Writer
	globals
	client   *mongo.Client // nil until connect
	producer *mscheduler.Producer[bson.RawValue]
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	uri, db, collection string
	connectTimeout      time.Duration
	verbose             bool // errors in full, as the driver gives them
}

// register adds the global flags to fs. Their defaults are their current
// values, so that registering them on a command's flag set keeps what the
// flags before the command set; the environment's defaults are applied
// after parsing (withDefaults), so that help never prints a URI, which may
// hold a password.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.uri, "uri", g.uri, "MongoDB connection `URI` (default $"+worker.EnvURI+")")
	fs.StringVar(&g.db, "db", g.db, "`database` of the collection (default $"+worker.EnvDatabase+", else \""+worker.DatabaseDefault+"\")")
	fs.StringVar(&g.collection, "collection", g.collection, "task `collection` (required)")
	fs.StringVar(&g.collection, "c", g.collection, "short for --collection")
	fs.DurationVar(&g.connectTimeout, "connect-timeout", g.connectTimeout, "how long to look for the server (default 5s)")
	fs.BoolVar(&g.verbose, "verbose", g.verbose, "print errors in full, as the driver gives them")
	fs.BoolVar(&g.verbose, "v", g.verbose, "short for --verbose")
}

// isGlobal reports whether the flag name is a global flag.
func isGlobal(name string) bool {
	switch name {
	case "uri", "db", "collection", "c", "connect-timeout", "verbose", "v":
		return true
	}
	return false
}

func (g *globals) withDefaults() {
	g.uri = cmp.Or(g.uri, os.Getenv(worker.EnvURI))
	g.db = cmp.Or(g.db, os.Getenv(worker.EnvDatabase), worker.DatabaseDefault)
	if g.connectTimeout == 0 {
		g.connectTimeout = connectTimeoutDefault
	}
}

// run runs the command line args and returns the exit status. Errors are
// written to stderr as one line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	err := c.dispatch(ctx, args)
	if c.client != nil {
		c.disconnect()
	}
	var usage *usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "mscheduler: %s\n", oneLine(usage.Error()))
		return exitUsage
	default:
		msg, ok := c.unreachable(err)
		if !ok || c.verbose {
			msg = err.Error()
		}
		fmt.Fprintf(stderr, "mscheduler: %s\n", oneLine(msg))
		return exitError
	}
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	top := newFlagSet("")
	c.globals.register(top)
	version := top.Bool("version", false, "print the version")
	if err := top.Parse(args); err != nil {
		return c.flagError(err, "", top)
	}
	if *version {
		_, err := fmt.Fprintf(c.stdout, "mscheduler %s\n", mscheduler.Version)
		return err
	}
	rest := top.Args()
	if len(rest) == 0 {
		return usageErrorf("no command given; run \"mscheduler help\"")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) == 1 && rest[0] != "help" {
			return c.dispatch(ctx, []string{rest[0], "-h"}) // "help publish" is "publish -h"
		}
		c.printUsage()
		return errHelpShown
	}
	if name == completeCommand { // the completion scripts' hidden command
		return c.complete(rest)
	}
	for _, cmd := range commands {
		if cmd.name == name {
			fs := newFlagSet(name)
			c.globals.register(fs)
			return cmd.run(ctx, c, fs, rest)
		}
	}
	if near := nearestCommand(name); near != "" {
		return usageErrorf("unknown command %q: did you mean %q? Run \"mscheduler help\" for the list", name, near)
	}
	return usageErrorf("unknown command %q; run \"mscheduler help\"", name)
}

// nearestCommand is the command a typo most likely meant: within two
// edits of it, the closest; "" if none is that close.
func nearestCommand(typed string) string {
	best, bestDist := "", 3
	for _, cmd := range append(commands, command{name: "help"}) {
		if d := editDistance(typed, cmd.name); d < bestDist {
			best, bestDist = cmd.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// connect makes the producer the commands use. It does no I/O: the driver
// connects on the first command, within the connect timeout.
func (c *cli) connect() error {
	c.globals.withDefaults()
	if c.collection == "" && c.uri != "" {
		return usageErrorf("no collection: give --collection (or -c)")
	}
	if err := c.connectDB(); err != nil {
		return err
	}
	var err error
	// Params are opaque here: bson.RawValue takes whatever a task stores.
	c.producer, err = mscheduler.NewProducer[bson.RawValue](c.client.Database(c.db).Collection(c.collection), nil)
	return err
}

// open connects and refuses a collection that does not exist: a mistyped
// -c would otherwise list nothing, say "not found" of every task, or be
// created by a publish (with its .meta collection), silently.
func (c *cli) open(ctx context.Context) error {
	if err := c.connect(); err != nil {
		return err
	}
	return c.mustExist(ctx)
}

// mustExist refuses a collection that does not exist (see open).
func (c *cli) mustExist(ctx context.Context) error {
	exists, err := c.exists(ctx, c.collection)
	if err != nil {
		return err
	}
	if !exists {
		return &opError{msg: fmt.Sprintf("collection %q does not exist in database %q (check -c and --db; publish --create or migrate --create makes a new one)", c.collection, c.db)}
	}
	return nil
}

// exists says whether the database holds a collection of that name.
func (c *cli) exists(ctx context.Context, name string) (bool, error) {
	names, err := c.client.Database(c.db).ListCollectionNames(ctx, bson.D{{Key: "name", Value: name}})
	if err != nil {
		return false, &opError{msg: fmt.Sprintf("reach the server: %v", err), err: err}
	}
	return len(names) > 0, nil
}

// connectDB makes the client, for commands that need no collection.
func (c *cli) connectDB() error {
	c.globals.withDefaults()
	switch {
	case c.uri == "":
		return usageErrorf("no server: set %s or --uri", worker.EnvURI)
	case !strings.HasPrefix(c.uri, "mongodb://") && !strings.HasPrefix(c.uri, "mongodb+srv://"):
		return usageErrorf("--uri must start with mongodb:// or mongodb+srv://")
	case c.connectTimeout < 0:
		return usageErrorf("--connect-timeout must be positive, got %s", c.connectTimeout)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(c.uri).
		SetAppName("mscheduler").
		SetServerSelectionTimeout(c.connectTimeout).
		SetConnectTimeout(c.connectTimeout))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	c.client = client
	return nil
}

func runVersion(_ context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	args, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("version", args); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "mscheduler %s\n", mscheduler.Version)
	return err
}

func (c *cli) disconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), c.connectTimeout)
	defer cancel()
	_ = c.client.Disconnect(ctx)
}

// oneLine keeps an error on one line of stderr: driver errors can span
// several.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// creatable refuses a name that a new task collection must not have: what
// MongoDB refuses ($, NUL, a system. prefix), the names of the library's
// own collections beside it, and a double quote, which the development
// server's SQLite storage cannot hold (it breaks the collection's table).
func (c *cli) creatable() error {
	name := c.collection
	switch {
	case strings.ContainsAny(name, "$\x00\""):
		return usageErrorf("collection %q: a new collection's name must not contain $, NUL or a double quote", name)
	case strings.HasPrefix(name, "system."):
		return usageErrorf("collection %q: names starting with system. are MongoDB's", name)
	case strings.HasSuffix(name, ".meta") || strings.HasSuffix(name, ".runs"):
		return usageErrorf("collection %q: .meta and .runs name the collections the library keeps beside a task collection", name)
	}
	return nil
}
