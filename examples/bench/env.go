package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

// params are the parameters of every benchmark task: when it was published
// (local clock, ns), for the latency phase.
type params struct {
	PublishedNS int64 `bson:"published_ns"`
}

// env is what every phase shares: the server, an unmonitored client for
// set-up, and a task document as the library writes it.
type env struct {
	cfg    config
	uri    string
	server string // description for the header
	admin  *mongo.Client
	db     *mongo.Database
	dev    *devserver.Server          // nil with MONGODB_URI
	slow   *mschedulertest.DelayProxy // with -server-delay: every client but admin goes through it
	began  time.Time

	// template is a task document written by Producer.Publish, which the
	// raw loop and the memory phase copy so that their documents have the
	// library's exact shape and size.
	template bson.D

	// logger is the consumers' logger: warnings only, so that the per-run
	// info lines neither flood the output nor cost time.
	logger *slog.Logger
}

func openEnv(ctx context.Context, cfg config) (_ *env, err error) {
	e := &env{cfg: cfg, began: time.Now(), logger: quietLogger()}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.uri = cfg.URI
	if e.uri == "" {
		e.uri = os.Getenv(worker.EnvURI)
	}
	if e.uri == "" {
		e.say("starting the development server")
		startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if e.dev, err = devserver.Start(startCtx, devserver.Options{Progress: func(msg string) { e.say("%s", msg) }}); err != nil {
			return nil, fmt.Errorf("start the development server (or set %s): %w", worker.EnvURI, err)
		}
		e.uri = e.dev.URI()
	}
	if e.admin, err = mongo.Connect(options.Client().ApplyURI(e.uri)); err != nil {
		return nil, err
	}
	e.db = e.admin.Database(database)
	if err := e.db.Drop(ctx); err != nil {
		return nil, fmt.Errorf("drop %s: %w", database, err)
	}
	e.server = e.describeServer(ctx)
	e.say("server: %s", e.server)
	if cfg.ServerDelay != "" {
		if err := e.slowDown(cfg.ServerDelay); err != nil {
			return nil, err
		}
	}
	if e.template, err = e.makeTemplate(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// quietLogger logs warnings and errors only, to stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// slowDown puts a proxy that holds every command for delay in front of
// the server: the clients of both sides talk through it from then on (set
// up and checks go direct, through admin).
func (e *env) slowDown(delay string) error {
	d, err := mschedulertest.ParseDelay(delay)
	if err != nil {
		return err
	}
	hosts := options.Client().ApplyURI(e.uri).Hosts
	if len(hosts) != 1 {
		return fmt.Errorf("-server-delay: the server URI names %d hosts; the proxy stands in front of one", len(hosts))
	}
	if e.slow, err = mschedulertest.StartDelayProxy(hosts[0], d); err != nil {
		return err
	}
	e.uri = e.slow.URI()
	e.say("every command of both sides held %s on its way to the server (a proxy at %s)", delay, e.slow.Addr())
	return nil
}

// close drops the database and stops what openEnv started.
func (e *env) close() {
	if e.slow != nil {
		e.slow.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.admin != nil {
		if err := e.db.Drop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop", database+":", err)
		}
		_ = e.admin.Disconnect(ctx)
	}
	if e.dev != nil {
		if err := e.dev.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
}

// say writes one progress line, with the time since the start.
func (e *env) say(format string, args ...any) {
	if e.cfg.Progress == nil {
		return
	}
	fmt.Fprintf(e.cfg.Progress, "[%6.1fs] %s\n", time.Since(e.began).Seconds(), fmt.Sprintf(format, args...))
}

// describeServer names the server: its hosts (never the credentials of the
// URI) and the version buildInfo reports.
func (e *env) describeServer(ctx context.Context) string {
	var info struct {
		Version string `bson:"version"`
	}
	version := "version unknown"
	if err := e.admin.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err == nil && info.Version != "" {
		version = "buildInfo version " + info.Version
	}
	if e.dev != nil {
		return fmt.Sprintf("development server (FerretDB on %s; %s) at %s", e.dev.Storage(), version, e.dev.Addr())
	}
	hosts := "?"
	if cs, err := connstring.Parse(e.uri); err == nil {
		hosts = strings.Join(cs.Hosts, ",")
	}
	return fmt.Sprintf("%s, %s", hosts, version)
}

// freshCollection drops the collection name and creates the library's
// indexes on it, with the unmonitored client.
func (e *env) freshCollection(ctx context.Context, name string) error {
	coll := e.db.Collection(name)
	if err := coll.Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return mscheduler.EnsureIndexes(ctx, coll)
}

// dropCollection drops a collection once its phase is done with it, which
// keeps the development server's database small for the next phases.
func (e *env) dropCollection(ctx context.Context, name string) error {
	if err := e.db.Collection(name).Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// makeTemplate publishes one task with the library and reads its document
// back.
func (e *env) makeTemplate(ctx context.Context) (bson.D, error) {
	const name = "template"
	if err := e.freshCollection(ctx, name); err != nil {
		return nil, err
	}
	coll := e.db.Collection(name)
	producer, err := mscheduler.NewProducer[params](coll, nil)
	if err != nil {
		return nil, err
	}
	if _, err := producer.Publish(ctx, mscheduler.Task[params]{Key: "template"}, nil); err != nil {
		return nil, fmt.Errorf("publish the template task: %w", err)
	}
	var doc bson.D
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "template"}}).Decode(&doc); err != nil {
		return nil, fmt.Errorf("read the template task: %w", err)
	}
	return doc, coll.Drop(ctx)
}

// taskDoc is a copy of the template with its own key and times: a pending
// task as Producer.Publish would write it.
func (e *env) taskDoc(key string, runAt, now time.Time) bson.D {
	doc := make(bson.D, len(e.template))
	copy(doc, e.template)
	for i := range doc {
		switch doc[i].Key {
		case "_id", "key":
			doc[i].Value = key
		case "run_at":
			doc[i].Value = runAt
		case "created_at", "updated_at":
			doc[i].Value = now
		case "params":
			doc[i].Value = params{PublishedNS: time.Now().UnixNano()}
		}
	}
	return doc
}

// commands counts the commands clients send, by name, once started, and
// adds up the time each took from send to reply as the client saw it.
type commands struct {
	mu      sync.Mutex
	started bool
	counts  map[string]int64
	times   map[string]time.Duration
	// statements are the statements of the writes that carry several
	// (insert, update, delete), by command name: with their commands they
	// tell how large the batches were.
	statements map[string]int64
}

func newCommands() *commands {
	return &commands{counts: map[string]int64{}, times: map[string]time.Duration{}, statements: map[string]int64{}}
}

// statementArrays names the array holding a write command's statements.
var statementArrays = map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}

// start begins counting: what clients send before (connecting) is left out.
func (c *commands) start() {
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
}

func (c *commands) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			c.mu.Lock()
			if c.started {
				c.counts[ev.CommandName]++
				c.statements[ev.CommandName] += statementsOf(ev)
			}
			c.mu.Unlock()
		},
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) { c.took(ev.CommandName, ev.Duration) },
		Failed:    func(_ context.Context, ev *event.CommandFailedEvent) { c.took(ev.CommandName, ev.Duration) },
	}
}

func (c *commands) took(name string, d time.Duration) {
	c.mu.Lock()
	if c.started {
		c.times[name] += d
	}
	c.mu.Unlock()
}

// statementsOf counts the statements of a write that carries several.
func statementsOf(ev *event.CommandStartedEvent) int64 {
	field, ok := statementArrays[ev.CommandName]
	if !ok {
		return 0
	}
	vals, err := ev.Command.Lookup(field).Array().Values()
	if err != nil {
		return 0
	}
	return int64(len(vals))
}

// snapshot copies the counts, times and statements so far into st.
func (c *commands) snapshot(st *runStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Commands, st.Times, st.Statements = maps.Clone(c.counts), maps.Clone(c.times), maps.Clone(c.statements)
}

// client connects a client whose commands count into cmds.
func (e *env) client(cmds *commands) (*mongo.Client, error) {
	return mongo.Connect(options.Client().ApplyURI(e.uri).SetMonitor(cmds.monitor()))
}

// clients connects n clients counting into cmds, and pings each so that
// the connection handshakes are done before anything is timed.
func (e *env) clients(ctx context.Context, n int, cmds *commands) ([]*mongo.Client, error) {
	out := make([]*mongo.Client, 0, n)
	for range n {
		c, err := e.client(cmds)
		if err == nil {
			err = c.Ping(ctx, nil)
		}
		if err != nil {
			disconnect(out...)
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func disconnect(clients ...*mongo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range clients {
		_ = c.Disconnect(ctx)
	}
}

// tally counts up to a total and says when it got there, or that it
// stopped moving.
type tally struct {
	mu    sync.Mutex
	n     int
	total int
	moved chan struct{} // closed and replaced on every count
}

func newTally(total int) *tally {
	return &tally{total: total, moved: make(chan struct{})}
}

func (p *tally) add() {
	p.mu.Lock()
	p.n++
	close(p.moved)
	p.moved = make(chan struct{})
	p.mu.Unlock()
}

func (p *tally) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

var errStalled = errors.New("no progress")

// wait blocks until the count reaches the total. It fails when the count
// does not move for stall, or ctx ends.
func (p *tally) wait(ctx context.Context, stall time.Duration) error {
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		p.mu.Lock()
		n, moved := p.n, p.moved
		p.mu.Unlock()
		if n >= p.total {
			return nil
		}
		select {
		case <-moved:
			timer.Reset(stall)
		case <-timer.C:
			return fmt.Errorf("%w for %s at %d of %d", errStalled, stall, n, p.total)
		case <-ctx.Done():
			return fmt.Errorf("at %d of %d: %w", n, p.total, ctx.Err())
		}
	}
}
