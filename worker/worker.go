package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

// closeTimeout bounds the disconnection from the server at the end of Run.
const closeTimeout = 10 * time.Second

type state int

const (
	stateNew     state = iota // consumers may be registered
	stateRunning              // Run was called
	stateDone                 // Run returned or Close was called
)

// consumer is a registered consumer, without its type parameters.
type consumer struct {
	collection string
	workerID   string
	discovery  mscheduler.Discovery
	start      func(context.Context) error
	stop       func(context.Context) error
	abandoned  func() int
	running    func() int
	leader     func() bool
	pressure   func() mscheduler.Pressure
	capacity   int
}

// Worker runs the consumers of one worker process. Create it with [New],
// add consumers with [Register], then call [Worker.Run] once.
type Worker struct {
	cfg    Config
	log    *slog.Logger // cfg.Logger with the worker id
	client *mongo.Client
	db     *mongo.Database
	server *devserver.Server // the development server New started, or nil

	ready chan struct{} // closed once Run has started every consumer
	// startTimeout is the deadline of the first start attempt
	// (startAttemptTimeout; shorter in tests).
	startTimeout time.Duration

	mu        sync.Mutex // guards state and consumers
	state     state
	consumers []*consumer

	countsMu sync.Mutex
	counts   map[mscheduler.EventKind]int64

	metrics  *metrics
	httpAddr atomic.Value // string: where the HTTP listener is bound

	closeOnce sync.Once
	closeErr  error
}

// New prepares the connection to the server and returns a worker with no
// consumers. It does no I/O with the server (the driver connects lazily):
// a server that is down when the process starts is waited for by Run. When
// the URI is empty and cfg.DevServer is set, it first starts the
// development server, bounded by ctx.
//
// The client's default write concern is majority unless the URI sets one,
// and retryable writes stay on (the driver's default): an acknowledged run
// end survives a failover. The consumers set majority on their own
// collections anyway (see [mscheduler.ConsumerConfig].WriteConcern).
//
// An invalid cfg returns an error naming the field (matching
// mscheduler.ErrInvalid) before connecting.
func New(ctx context.Context, cfg Config) (*Worker, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:          c,
		log:          c.Logger.With("worker_id", c.WorkerID),
		ready:        make(chan struct{}),
		counts:       map[mscheduler.EventKind]int64{},
		startTimeout: startAttemptTimeout,
	}
	w.metrics = newMetrics(w)
	if w.cfg.URI == "" {
		w.log.Info("no URI set: starting the development server")
		s, err := devserver.Start(ctx, devserver.Options{Progress: func(msg string) { w.log.Info(msg) }})
		if err != nil {
			return nil, fmt.Errorf("worker: start the development server (or set %s): %w", EnvURI, err)
		}
		w.server = s
		w.cfg.URI = s.URI()
	}
	if err := w.connect(); err != nil {
		if w.server != nil {
			_ = w.server.Stop()
		}
		return nil, err
	}
	return w, nil
}

func (w *Worker) connect() error {
	opts := options.Client().ApplyURI(w.cfg.URI)
	if err := opts.Validate(); err != nil {
		return invalid("URI", "%v", err)
	}
	if opts.WriteConcern == nil {
		opts.SetWriteConcern(writeconcern.Majority())
	}
	if opts.AppName == nil {
		opts.SetAppName("mscheduler-worker " + w.cfg.WorkerID)
	}
	if opts.Timeout != nil {
		// A client timeout puts a deadline on every command, and the
		// driver refuses to send a command whose deadline is nearer than
		// its least round trip: on a slow server, pings near their lease
		// would never leave. The library bounds its commands by leases.
		w.log.Warn("the URI's timeoutMS applies a deadline to every command; on a slow server the driver will refuse to send pings it could still have landed", "timeout", *opts.Timeout)
	}
	opts.SetMonitor(w.metrics.commandMonitor())
	client, err := mongo.Connect(opts)
	if err != nil {
		return fmt.Errorf("worker: connect to %s: %w", redact(w.cfg.URI), err)
	}
	w.client = client
	w.db = client.Database(w.cfg.Database)
	return nil
}

// Register adds a consumer of collection (in the worker's database) that
// runs h. cfg may be nil; it is copied, and the copy's WorkerID, Groups and
// Logger are filled from the worker's when empty. Its OnEvent hook, if
// any, is still called, after the worker counts the event (see
// [Worker.Counts]). Register fails once Run was called, for a collection
// already registered under the same worker id, and for an invalid cfg
// (with the error of [mscheduler.NewConsumer]).
func Register[P, R any](w *Worker, collection string, h mscheduler.Handler[P, R], cfg *mscheduler.ConsumerConfig) error {
	if collection == "" {
		return invalid("collection", "must not be empty")
	}
	c := mscheduler.ConsumerConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.WorkerID == "" {
		c.WorkerID = w.cfg.WorkerID
	}
	if len(c.Groups) == 0 {
		c.Groups = slices.Clone(w.cfg.Groups)
	}
	if c.Logger == nil {
		c.Logger = w.cfg.Logger // the consumer adds worker_id and collection
	}
	user := c.OnEvent
	c.OnEvent = func(e mscheduler.Event) {
		w.count(e.Kind)
		w.metrics.observe(collection, e)
		if user != nil {
			user(e)
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != stateNew {
		return fmt.Errorf("worker: Register(%q) after Run or Close was called", collection)
	}
	for _, r := range w.consumers {
		if r.collection == collection && r.workerID == c.WorkerID {
			return fmt.Errorf("worker: collection %q is already registered for worker %q", collection, c.WorkerID)
		}
	}
	con, err := mscheduler.NewConsumer(w.db.Collection(collection), h, &c)
	if err != nil {
		return err
	}
	w.consumers = append(w.consumers, &consumer{
		collection: collection,
		workerID:   c.WorkerID,
		discovery:  c.Discovery,
		start:      con.Start,
		stop:       con.Stop,
		abandoned:  con.Abandoned,
		running:    con.Running,
		leader:     con.MaintenanceLeader,
		pressure:   con.Pressure,
		capacity:   con.Capacity(),
	})
	return nil
}

// Run creates the indexes of every registered collection (unless
// Config.SkipIndexes), starts every consumer, and blocks until ctx is done
// or SIGINT or SIGTERM arrives. While the server cannot be reached, the
// start is tried again with backoff (1 s doubling to 30 s), each attempt
// logged at WARN with its error, until it succeeds or the stop comes; an
// answer that retrying cannot change (a collection at a newer schema
// version, a command the server refuses) ends Run with the error. It then stops the consumers: running
// handlers get ShutdownTimeout to finish, then are cancelled and their runs
// released. Once the first signal has been received, a second one kills the
// process as usual. Run finally disconnects from the server and stops the
// development server if New started it. It logs its start, its stop and the
// event counters of [Worker.Counts].
//
// Run returns nil after a clean shutdown, including one requested while it
// was still starting; it returns an error if the worker has no consumers,
// Run was already called, indexes could not be created or a consumer could
// not start. It can be called once.
func (w *Worker) Run(ctx context.Context) (err error) {
	w.mu.Lock()
	switch {
	case w.state != stateNew:
		w.mu.Unlock()
		return errors.New("worker: Run can be called once, and not after Close")
	case len(w.consumers) == 0:
		w.mu.Unlock()
		return errors.New("worker: Run called with no registered consumer")
	}
	w.state = stateRunning
	consumers := slices.Clone(w.consumers)
	w.mu.Unlock()
	defer func() {
		err = errors.Join(err, w.close())
		w.mu.Lock()
		w.state = stateDone
		w.mu.Unlock()
	}()

	runCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	began := time.Now()

	started, startErr := w.startAllRetrying(runCtx, consumers)
	var srv *http.Server
	if startErr == nil {
		srv, startErr = w.serveHTTP()
	}
	auxCtx, stopAux := context.WithCancel(context.Background())
	var aux sync.WaitGroup
	defer func() {
		stopAux()
		aux.Wait()
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = srv.Shutdown(ctx)
			cancel()
		}
	}()
	if startErr == nil {
		aux.Go(func() { w.heartbeat(auxCtx, consumers) })
		aux.Go(func() { w.metrics.countTasks(auxCtx, w, consumers) })
		w.log.Info("worker started",
			"collections", w.collections(consumers),
			"server", redact(w.cfg.URI),
			"dev_server", w.server != nil,
			"database", w.cfg.Database,
			"discovery", w.discovery(runCtx, consumers),
			"shutdown_timeout", w.cfg.ShutdownTimeout.String(),
		)
		close(w.ready)
		<-runCtx.Done()
	}
	if runCtx.Err() == nil { // a start-up failure, not a stop request
		w.stopAll(started, 0)
		w.log.Error("worker failed to start", "error", startErr)
		return startErr
	}
	reason := context.Cause(runCtx)
	stopSignals() // a second signal now kills the process
	w.log.Info("worker stopping", "reason", reason.Error(), "running_for", time.Since(began).Round(time.Millisecond).String())
	stoppedIn := w.stopAll(started, w.cfg.ShutdownTimeout)
	stopAux()
	aux.Wait()
	w.deregister()
	w.log.Info("worker stopped", "stopped_in", stoppedIn.Round(time.Millisecond).String(), "events", w.countsAttr(),
		"abandoned_running", w.Abandoned())
	return nil
}

// Start-up attempts while the server cannot be reached, or answers too
// slowly. The first attempt has startAttemptTimeout; each one that ran out
// of time on a server that answered has twice the last one's, up to
// startAttemptTimeoutMax: a start-up whose commands take longer than a
// fixed deadline (index builds on a large collection, a busy server) would
// otherwise be cut short and begun again for ever.
const (
	startAttemptTimeout    = 10 * time.Second
	startAttemptTimeoutMax = 5 * time.Minute
	startRetryFirst        = time.Second
	startRetryMax          = 30 * time.Second
)

// startAllRetrying starts every consumer, trying again while the server
// cannot be reached or answers too slowly; consumers that started stay
// started. It returns the consumers started, and the error that ended the
// attempts (nil when all started, ctx's when the stop came first).
func (w *Worker) startAllRetrying(ctx context.Context, consumers []*consumer) ([]*consumer, error) {
	var started []*consumer
	indexed := map[string]bool{}
	delay, timeout := startRetryFirst, w.startTimeout
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := w.startAll(actx, consumers[len(started):], &started, indexed)
		cancel()
		switch {
		case err == nil:
			return started, nil
		case ctx.Err() != nil:
			return started, ctx.Err()
		case tooSlow(err):
			timeout = min(2*timeout, startAttemptTimeoutMax)
			w.log.Warn("server slow: the start took longer than its deadline; trying it again with a longer one", "attempt", attempt, "retry_in", delay.String(),
				"deadline", timeout.String(), "server", redact(w.cfg.URI), "error", err)
		case unreachable(err):
			w.log.Warn("server unreachable; trying the start again", "attempt", attempt, "retry_in", delay.String(), "server", redact(w.cfg.URI), "error", err)
		default:
			return started, err
		}
		select {
		case <-ctx.Done():
			return started, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, startRetryMax)
	}
}

// unreachable reports an error of a server that did not answer (the
// network, a timeout, no server to select), as opposed to an answer that
// retrying cannot change.
func unreachable(err error) bool {
	if errors.Is(err, mscheduler.ErrSchema) || errors.Is(err, mscheduler.ErrInvalid) || errors.Is(err, mscheduler.ErrNotTaskCollection) {
		return false
	}
	var se mongo.ServerError
	return !errors.As(err, &se) || mongo.IsNetworkError(err) || mongo.IsTimeout(err)
}

// tooSlow reports a command that ran out of time on a server that was
// selected (it answers: a server that cannot be reached fails server
// selection): the server is slow, and a longer deadline may see the start
// through.
func tooSlow(err error) bool {
	var sel topology.ServerSelectionError
	return unreachable(err) && mongo.IsTimeout(err) && !errors.As(err, &sel)
}

// startAll ensures the indexes of the collections not indexed yet, then
// starts the consumers in order, appending each one started to started.
func (w *Worker) startAll(ctx context.Context, consumers []*consumer, started *[]*consumer, indexed map[string]bool) error {
	if !w.cfg.SkipIndexes {
		for _, name := range w.collections(consumers) {
			if indexed[name] {
				continue
			}
			if err := mscheduler.EnsureIndexes(ctx, w.db.Collection(name)); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			indexed[name] = true
		}
	}
	for _, c := range consumers {
		if err := c.start(ctx); err != nil {
			return fmt.Errorf("worker: start consumer of %s: %w", c.collection, err)
		}
		*started = append(*started, c)
	}
	return nil
}

// stopAll stops the consumers at once, each waiting up to timeout for its
// handlers, and returns how long it took.
func (w *Worker) stopAll(consumers []*consumer, timeout time.Duration) time.Duration {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range consumers {
		wg.Go(func() {
			if err := c.stop(ctx); err != nil {
				w.log.Error("consumer did not stop cleanly", "collection", c.collection, "error", err)
			}
		})
	}
	wg.Wait()
	return time.Since(began)
}

// close disconnects and stops the development server, once.
func (w *Worker) close() error {
	w.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := w.client.Disconnect(ctx); err != nil {
			w.closeErr = fmt.Errorf("worker: disconnect: %w", err)
		}
		if w.server != nil {
			if err := w.server.Stop(); err != nil {
				w.closeErr = errors.Join(w.closeErr, fmt.Errorf("worker: stop the development server: %w", err))
			}
		}
	})
	return w.closeErr
}

// Close disconnects from the server and stops the development server if New
// started it, for a worker whose Run is never called (Run does this itself).
// It fails while Run is running; after Close, Register and Run fail.
func (w *Worker) Close() error {
	w.mu.Lock()
	if w.state == stateRunning {
		w.mu.Unlock()
		return errors.New("worker: Close called while Run is running; cancel Run's context instead")
	}
	w.state = stateDone
	w.mu.Unlock()
	return w.close()
}

// Ready is closed once Run has started every consumer.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Client is the worker's client. Run disconnects it when it returns.
func (w *Worker) Client() *mongo.Client { return w.client }

// Database is the database holding the task collections.
func (w *Worker) Database() *mongo.Database { return w.db }

// ID is the worker id, the default WorkerID of the consumers.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// URI is the connection string in use: the configured one, or the
// development server's.
func (w *Worker) URI() string { return w.cfg.URI }

// Counts returns how many events of each kind the worker's consumers have
// reported so far (see [mscheduler.EventKind]); kinds that did not happen
// are absent.
func (w *Worker) Counts() map[mscheduler.EventKind]int64 {
	w.countsMu.Lock()
	defer w.countsMu.Unlock()
	return maps.Clone(w.counts)
}

// Abandoned is the number of handler goroutines the worker's consumers gave
// up on (they ignored their cancelled context) that are still running; see
// [mscheduler.Consumer.Abandoned]. Above zero, the process leaks them.
func (w *Worker) Abandoned() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.consumers {
		n += c.abandoned()
	}
	return n
}

func (w *Worker) count(kind mscheduler.EventKind) {
	w.countsMu.Lock()
	w.counts[kind]++
	w.countsMu.Unlock()
}

// countsAttr is the event counters as a log group, in a stable order.
func (w *Worker) countsAttr() slog.Value {
	counts := w.Counts()
	attrs := make([]slog.Attr, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		attrs = append(attrs, slog.Int64(string(k), counts[k]))
	}
	return slog.GroupValue(attrs...)
}

// collections are the distinct collection names, in registration order.
func (w *Worker) collections(consumers []*consumer) []string {
	var names []string
	for _, c := range consumers {
		if !slices.Contains(names, c.collection) {
			names = append(names, c.collection)
		}
	}
	return names
}

// discovery says, per collection, how its consumer finds new tasks. The
// consumer does not say whether its change stream opened, so for
// DiscoveryAuto the worker opens one itself to find out.
func (w *Worker) discovery(ctx context.Context, consumers []*consumer) map[string]string {
	out := map[string]string{}
	for _, c := range consumers {
		d := c.discovery
		if d == "" || d == mscheduler.DiscoveryAuto {
			d = mscheduler.DiscoveryPoll
			if cs, err := w.db.Collection(c.collection).Watch(ctx, mongo.Pipeline{}); err == nil {
				_ = cs.Close(ctx)
				d = mscheduler.DiscoveryChangeStream
			}
		}
		out[c.collection] = string(d)
	}
	return out
}

// redact is a connection string as logs may show it: its hosts and
// database, nothing else. A password may hold any character ("?", "/",
// "@" percent-encoded or not) and the query secrets of its own
// (tlsCertificateKeyFilePassword, authMechanismProperties): cutting the
// text by hand let them through, so the driver's own parser reads it.
// An SRV string is read as a plain one: parsing it as SRV looks its name
// up in DNS, which a log line must not do.
func redact(uri string) string {
	plain, srv := strings.CutPrefix(uri, connstring.SchemeMongoDBSRV+"://")
	if srv {
		plain = connstring.SchemeMongoDB + "://" + plain
	}
	cs, err := connstring.Parse(plain)
	if err != nil {
		return "(a connection string that does not parse)"
	}
	scheme := connstring.SchemeMongoDB
	if srv {
		scheme = connstring.SchemeMongoDBSRV
	}
	return scheme + "://" + strings.Join(cs.Hosts, ",") + "/" + cs.Database
}
