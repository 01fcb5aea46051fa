package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/internal/webguard"
)

// Defaults of Config.
const (
	CapacityDefault   = 64
	MaxTakeDefault    = 64
	MaxWaitDefault    = 60 * time.Second
	MaxWaitingDefault = 256
	// MaxWaitingPerExecutorDefault is Config.MaxWaitingPerExecutor's.
	MaxWaitingPerExecutorDefault = 16
	// MaxPoolsDefault is Config.MaxPools'.
	MaxPoolsDefault     = 64
	UntakenHoldDefault  = 2 * time.Second
	MaxBodyBytesDefault = 16 << 20
	EndWaitDefault      = 30 * time.Second
)

// Executor is who a token speaks for: an executor id, stable across its
// restarts, and the groups whose tasks it may run.
type Executor struct {
	ID     string
	Groups []string
}

// Config configures a Gateway. The zero value serves this machine only,
// with executors naming themselves.
type Config struct {
	// Collections are the task collections the gateway serves. A request
	// naming another is answered 404, and one of them is served only while
	// it is a task collection (see mscheduler.CheckTaskCollection): the
	// gateway reads and writes no collection it was not given. Required.
	Collections []string
	// Tokens maps each bearer token to the executor it speaks for. With
	// none, only this machine's peers are served, and executors name
	// themselves (the "executor" and "groups" of their requests).
	Tokens map[string]Executor
	// WorkerID names the gateway: its executors show in the worker
	// registry as executors "via" it. The runs an executor takes are held
	// in the task documents under the executor's own id, by a consumer the
	// gateway runs for it. Defaults to the host name and "-gateway".
	WorkerID string
	// Capacity is the most runs one executor holds at once in one
	// collection, with it or waiting for it. Defaults to [CapacityDefault].
	Capacity int
	// MaxTake bounds the runs one take returns. Defaults to [MaxTakeDefault].
	MaxTake int
	// MaxWait bounds how long a take waits for work. Defaults to
	// [MaxWaitDefault].
	MaxWait time.Duration
	// MaxWaiting bounds the takes waiting at once; more are refused with
	// 429. A take with wait_ms 0 does not wait, and is never refused for
	// it. Defaults to [MaxWaitingDefault].
	MaxWaiting int
	// MaxWaitingPerExecutor bounds the takes one executor (one token's, or
	// one that names itself) has waiting at once, so that no executor
	// holds every waiting place: more are refused with 429. Defaults to
	// [MaxWaitingPerExecutorDefault].
	MaxWaitingPerExecutor int
	// MaxPools bounds the consumers the gateway runs: one per executor,
	// collection and set of groups. A take that would start one more is
	// refused with 429, naming the bound. The consumer of an executor
	// that has not called for StaleAfterBeats heartbeats and holds no run
	// is stopped. Defaults to [MaxPoolsDefault].
	MaxPools int
	// UntakenHold is how long a claimed run waits for a taker (its take
	// gave up meanwhile) before it is released for others. Defaults to
	// [UntakenHoldDefault].
	UntakenHold time.Duration
	// EndWait bounds how long complete, fail and release wait for the run
	// end to be written before answering 202. Defaults to [EndWaitDefault].
	EndWait time.Duration
	// MaxBodyBytes bounds a request's body: 413 beyond. Defaults to
	// [MaxBodyBytesDefault], room for the largest params the library takes.
	MaxBodyBytes int64
	// AllowedHosts are the host names answered besides localhost and IP
	// addresses, as for the dashboard. Defaults to none.
	AllowedHosts []string
	// Consumer is the template of the consumers' configuration; its
	// WorkerID, Groups, Capacity, ClaimDemand and OnEvent are the
	// gateway's. Defaults to the library's defaults.
	Consumer mscheduler.ConsumerConfig
	// HeartbeatInterval is how often the executors that call are announced
	// in the worker registry (mscheduler.workers), where the dashboard and
	// the command's workers list show them. Defaults to
	// [HeartbeatIntervalDefault].
	HeartbeatInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.WorkerID == "" {
		out.WorkerID = mscheduler.DefaultWorkerID() + "-gateway" // per process: two gateways of a host must not share fences

	}
	out.Capacity = cmp.Or(out.Capacity, CapacityDefault)
	out.MaxTake = cmp.Or(out.MaxTake, MaxTakeDefault)
	out.MaxWait = cmp.Or(out.MaxWait, MaxWaitDefault)
	out.MaxWaiting = cmp.Or(out.MaxWaiting, MaxWaitingDefault)
	out.MaxWaitingPerExecutor = cmp.Or(out.MaxWaitingPerExecutor, MaxWaitingPerExecutorDefault)
	out.MaxPools = cmp.Or(out.MaxPools, MaxPoolsDefault)
	out.UntakenHold = cmp.Or(out.UntakenHold, UntakenHoldDefault)
	out.EndWait = cmp.Or(out.EndWait, EndWaitDefault)
	out.MaxBodyBytes = cmp.Or(out.MaxBodyBytes, MaxBodyBytesDefault)
	out.HeartbeatInterval = cmp.Or(out.HeartbeatInterval, HeartbeatIntervalDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	if len(c.Collections) == 0 {
		return errors.New("gateway: invalid Collections: name the task collections to serve (the command's -c or --collections)")
	}
	for i, name := range c.Collections {
		if err := mscheduler.CheckTaskCollectionName(name); err != nil {
			return fmt.Errorf("gateway: invalid Collections[%d]: %w", i, err)
		}
	}
	if err := mscheduler.ValidateWorkerID(c.WorkerID); err != nil {
		return fmt.Errorf("gateway: invalid WorkerID: %w", err)
	}
	for name, v := range map[string]int{"Capacity": c.Capacity, "MaxTake": c.MaxTake, "MaxWaiting": c.MaxWaiting, "MaxWaitingPerExecutor": c.MaxWaitingPerExecutor, "MaxPools": c.MaxPools} {
		if v < 0 {
			return fmt.Errorf("gateway: invalid %s: must not be negative, got %d", name, v)
		}
	}
	for token, ex := range c.Tokens {
		if len(token) < 16 {
			return fmt.Errorf("gateway: invalid Tokens: a token of executor %q has %d characters, want 16 or more", ex.ID, len(token))
		}
		if err := mscheduler.ValidateWorkerID(ex.ID); err != nil {
			return fmt.Errorf("gateway: invalid Tokens[…].ID: %w", err)
		}
		for _, g := range ex.Groups {
			if err := mscheduler.ValidateWorkerID(g); err != nil {
				return fmt.Errorf("gateway: invalid Tokens[…].Groups of %q: %w", ex.ID, err)
			}
		}
	}
	for i, name := range c.AllowedHosts {
		if !webguard.ValidHostName(name) {
			return fmt.Errorf("gateway: invalid AllowedHosts[%d]: %q is not a host name (no scheme, port or path)", i, name)
		}
	}
	return nil
}

// Gateway is the HTTP front end. Its pools start on first use; Stop ends
// them, giving back the runs they hold.
type Gateway struct {
	db      *mongo.Database
	cfg     *Config
	mux     *http.ServeMux
	guarded http.Handler // mux, refusing cross-site requests of browsers

	mu        sync.Mutex // guards what follows; handlers and the pools' handlers take it
	pools     map[string]*poolEntry
	producers map[string]*mscheduler.Producer[bson.RawValue]
	runs      map[string]*parked               // by run id: every run a handler holds
	sessions  map[string]*sessions             // by executor id
	waiting   int                              // takes waiting, all pools
	waitingOf map[string]int                   // takes waiting, by executor id
	ends      map[string]chan mscheduler.Event // by run id: end requests waiting for their run's end
	stopped   bool
	stopCh    chan struct{} // closed by Stop: parked runs are released
	executors map[string]*executorSeen
	beating   bool          // the heartbeat loop runs
	beatsDone chan struct{} // closed when it ends
}

// New returns a gateway for the task collections of db.
func New(db *mongo.Database, cfg *Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Gateway{
		db: db, cfg: cfg, mux: http.NewServeMux(),
		pools: map[string]*poolEntry{}, producers: map[string]*mscheduler.Producer[bson.RawValue]{},
		runs: map[string]*parked{}, sessions: map[string]*sessions{}, stopCh: make(chan struct{}),
		executors: map[string]*executorSeen{}, beatsDone: make(chan struct{}), waitingOf: map[string]int{},
	}
	for _, r := range Routes {
		g.mux.HandleFunc(r.Method+" "+r.Pattern, g.route(r))
	}
	// A page of another site in the operator's browser may POST to a
	// gateway on loopback (a form, or a fetch without CORS); browsers say
	// so in Sec-Fetch-Site or Origin, and such requests are refused.
	g.guarded = http.NewCrossOriginProtection().Handler(g.mux)
	return g, nil
}

// ServeHTTP serves the routes of Routes, guarded.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	webguard.SetHeaders(w.Header())
	if !webguard.HostAllowed(r.Host, g.cfg.AllowedHosts) {
		writeError(w, http.StatusMisdirectedRequest, "host", fmt.Sprintf("this gateway does not answer to the host %q: list it in Config.AllowedHosts (the command's --allow-host)", webguard.HostOf(r.Host)))
		return
	}
	if r.ContentLength > g.cfg.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("the body is larger than %d bytes (MaxBodyBytes)", g.cfg.MaxBodyBytes))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes)
	}
	g.guarded.ServeHTTP(w, r)
}

// Stop stops every pool: runs waiting for a taker or with an executor are
// released at once, and their executors' next calls get 409. It waits for
// the consumers to write those ends, as Consumer.Stop does, until ctx is
// done. It may be called more than once.
func (g *Gateway) Stop(ctx context.Context) error {
	g.mu.Lock()
	if !g.stopped {
		close(g.stopCh)
	}
	g.stopped = true
	beating := g.beating
	entries := make([]*poolEntry, 0, len(g.pools))
	for _, e := range g.pools {
		entries = append(entries, e)
	}
	g.mu.Unlock()
	if beating {
		select {
		case <-g.beatsDone:
		case <-ctx.Done():
		}
	}
	var errs []error
	for _, e := range entries {
		select {
		case <-e.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.p != nil {
			errs = append(errs, e.p.consumer.Stop(ctx))
		}
	}
	// Its executors hold nothing through it any more: they leave the
	// registry, as a worker process does on a clean stop, rather than show
	// their last running counts until they go stale.
	g.mu.Lock()
	ids := slices.Collect(maps.Keys(g.executors))
	g.mu.Unlock()
	for _, id := range ids {
		if err := mscheduler.Deregister(ctx, g.db, id); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// caller is who a request comes from.
type caller struct {
	executor Executor
	named    bool // the executor named itself: no tokens are configured
}

// authenticate finds the caller of r: the executor of its bearer token,
// or, with no tokens configured, a peer on this machine.
func (g *Gateway) authenticate(r *http.Request) (caller, *apiError) {
	if len(g.cfg.Tokens) == 0 {
		if !webguard.FromLoopback(r.RemoteAddr) {
			return caller{}, &apiError{http.StatusForbidden, "token", "a gateway without tokens serves this machine only: set Config.Tokens (the command's --tokens)", nil}
		}
		return caller{named: true}, nil
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return caller{}, &apiError{http.StatusUnauthorized, "token", "send Authorization: Bearer <token>", nil}
	}
	// Every token is compared, whichever matches: how long the search took
	// tells nothing of where the match was.
	var found *Executor
	for t, ex := range g.cfg.Tokens {
		if webguard.TokenEqual(token, t) {
			found = &ex
		}
	}
	if found != nil {
		return caller{executor: *found}, nil
	}
	return caller{}, &apiError{http.StatusUnauthorized, "token", "the token is not one of this gateway's", nil}
}

// scope is the groups whose tasks the caller sees and acts on: with
// tokens, its executor's groups and "" (the tasks of no group), as its
// takes claim; without tokens, every group (nil).
func (c caller) scope() []string {
	if c.named {
		return nil
	}
	return append(slices.Clone(c.executor.Groups), "")
}

// executorOf settles the executor of a request body's claims: the token's,
// or with no tokens the body's own, which must then be given.
func (c caller) executorOf(id string, groups []string) (Executor, *apiError) {
	if c.named {
		if err := mscheduler.ValidateWorkerID(id); err != nil {
			return Executor{}, &apiError{http.StatusBadRequest, "executor", reasonOf(err), nil}
		}
		for i, g := range groups {
			if err := mscheduler.ValidateWorkerID(g); err != nil { // a group names the pool's worker id
				return Executor{}, &apiError{http.StatusBadRequest, fmt.Sprintf("groups[%d]", i), reasonOf(err), nil}
			}
		}
		return Executor{ID: id, Groups: groups}, nil
	}
	if id != "" && id != c.executor.ID {
		return Executor{}, &apiError{http.StatusForbidden, "executor", fmt.Sprintf("the token speaks for executor %q, not %q", c.executor.ID, id), nil}
	}
	if groups != nil && !slices.Equal(sortedCopy(groups), sortedCopy(c.executor.Groups)) {
		return Executor{}, &apiError{http.StatusForbidden, "groups", "the token's groups are set by the gateway; leave groups out", nil}
	}
	return c.executor, nil
}

// reasonOf is what a library *InvalidError says is wrong, without the
// library's field name.
func reasonOf(err error) string {
	var ie *mscheduler.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// producer returns the producer of a collection that exists.
func (g *Gateway) producer(ctx context.Context, coll string) (*mscheduler.Producer[bson.RawValue], *apiError) {
	g.mu.Lock()
	p := g.producers[coll]
	g.mu.Unlock()
	if p != nil {
		return p, nil
	}
	if !slices.Contains(g.cfg.Collections, coll) {
		return nil, &apiError{http.StatusNotFound, "collection", fmt.Sprintf("collection %q is not one this gateway serves", coll), nil}
	}
	if err := mscheduler.CheckTaskCollection(ctx, g.db.Collection(coll)); err != nil {
		return nil, serverError(err)
	}
	names, err := g.db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: coll}})
	if err != nil && ctx.Err() != nil {
		return nil, &apiError{http.StatusServiceUnavailable, "", "the request ended before the gateway answered: it is stopping, or the client went away", nil}
	}
	if err != nil {
		return nil, serverError(err)
	}
	if len(names) == 0 {
		return nil, &apiError{http.StatusNotFound, "collection", fmt.Sprintf("collection %q does not exist: create it with mscheduler -c %s migrate --create", coll, coll), nil}
	}
	np, err := mscheduler.NewProducer[bson.RawValue](g.db.Collection(coll), nil)
	if err != nil {
		return nil, serverError(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.producers[coll]; p != nil {
		return p, nil
	}
	g.producers[coll] = np
	return np, nil
}
