package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/internal/webguard"
)

// EnvToken names the environment variable with the default Config.Token.
const EnvToken = "MSCHEDULER_DASHBOARD_TOKEN"

// QueryTimeoutDefault bounds every query a page sends (the driver sends
// it to the server as maxTimeMS), so that the dashboard never keeps the
// server busy for the workers.
const QueryTimeoutDefault = 5 * time.Second

// Config configures the dashboard. The zero value serves every task
// collection of the database read-only, to this machine alone, unless the
// MSCHEDULER_DASHBOARD_TOKEN environment variable sets a token: acting
// takes a token, even on loopback.
type Config struct {
	// Collections are the task collections shown. Defaults to every
	// collection of the database that has the library's metadata beside it
	// (<name>.meta), found at each page view.
	Collections []string
	// ReadOnly hides every action and refuses every POST (403), even with
	// a Token: for a dashboard that people may look at but not act from.
	// Without a Token a dashboard is read-only whatever ReadOnly says.
	ReadOnly bool
	// Token, when set, is required on every request, and lets the
	// dashboard act unless it is ReadOnly. It is taken as the password of
	// HTTP basic authentication (any user name), which a browser asks for;
	// as "Authorization: Bearer <token>"; or from a login link, ?token=<token>
	// on any page, which sets a session cookie (HttpOnly, SameSite=Lax,
	// holding a digest of the token, not the token) and redirects to the
	// same page without the parameter. Without a token the dashboard is
	// read-only and answers this machine alone. Defaults to the
	// MSCHEDULER_DASHBOARD_TOKEN environment variable ([EnvToken]).
	Token string
	// QueryTimeout bounds each query. Defaults to [QueryTimeoutDefault].
	QueryTimeout time.Duration
	// AllowedHosts are the host names (as in the Host header, without the
	// port) the dashboard answers to, besides localhost and IP addresses
	// (127.0.0.1, ::1, the address it is bound to), which it always answers
	// to. A request for any other name is refused with 421, token or not,
	// so that a page whose name was rebound to the dashboard's address (DNS
	// rebinding) cannot read or act. The command and the worker runtime add
	// the name of their listening address. Defaults to none.
	AllowedHosts []string
	// MaxBodyBytes bounds a request's body; a longer one is refused with
	// 413. Defaults to [MaxBodyBytesDefault].
	MaxBodyBytes int64
	// MaxEventStreams bounds the live-update streams open at once (one
	// per open page); more are refused with 503, and those pages reload
	// by themselves later. Defaults to [MaxEventStreamsDefault].
	MaxEventStreams int
	// Logger receives the errors of pages and actions. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Token = cmp.Or(c.Token, os.Getenv(EnvToken))
	c.QueryTimeout = cmp.Or(c.QueryTimeout, QueryTimeoutDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.MaxEventStreams = cmp.Or(c.MaxEventStreams, MaxEventStreamsDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.QueryTimeout < 0 {
		return fmt.Errorf("dashboard: invalid QueryTimeout: must be positive, got %s", c.QueryTimeout)
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("dashboard: invalid MaxBodyBytes: must be positive, got %d", c.MaxBodyBytes)
	}
	if c.MaxEventStreams < 0 {
		return fmt.Errorf("dashboard: invalid MaxEventStreams: must be positive, got %d", c.MaxEventStreams)
	}
	for i, name := range c.AllowedHosts {
		if !webguard.ValidHostName(name) {
			return fmt.Errorf("dashboard: invalid AllowedHosts[%d]: %q is not a host name (no scheme, port or path)", i, name)
		}
	}
	for i, name := range c.Collections {
		if name == "" || strings.HasPrefix(name, "system.") {
			return fmt.Errorf("dashboard: invalid Collections[%d]: %q cannot be a task collection", i, name)
		}
	}
	return nil
}

// Dashboard serves the pages. Create it with New; it is an http.Handler,
// to mount under any prefix with http.StripPrefix.
type Dashboard struct {
	db    *mongo.Database
	cfg   Config
	pages *pages
	root  http.Handler

	mu        sync.Mutex // guards producers
	producers map[string]*mscheduler.Producer[bson.RawValue]
}

// New returns the dashboard of the task collections of db.
func New(db *mongo.Database, cfg *Config) (*Dashboard, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{db: db, cfg: c, pages: p, producers: map[string]*mscheduler.Producer[bson.RawValue]{}}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	mux.HandleFunc("GET /{$}", d.overview)
	mux.HandleFunc("GET /tasks", d.tasks)
	mux.HandleFunc("GET /task", d.task)
	mux.HandleFunc("GET /workers", d.workers)
	mux.HandleFunc("GET /schedules", d.schedules)
	mux.HandleFunc("GET /events", newDashboardEvents(d).serve)
	mux.HandleFunc("POST /task", d.act)
	mux.HandleFunc("POST /tasks", d.actMany)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "No such page: "+r.URL.Path)
	})
	// Cross-origin POSTs are refused: the browser says where a request
	// comes from (Sec-Fetch-Site, Origin), and only same-origin ones act.
	d.root = d.guard(d.authenticate(http.NewCrossOriginProtection().Handler(d.refuseActionsIfReadOnly(mux))))
	return d, nil
}

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.root.ServeHTTP(w, r)
}

// ReadOnly says the dashboard hides and refuses every action: it was
// configured ReadOnly, or it has no token, since acting takes credentials
// even on loopback (any process or page of this machine reaches it).
func (d *Dashboard) ReadOnly() bool { return d.readOnlyWhy() != "" }

// readOnlyWhy says, for the pages, why the dashboard is read-only; empty
// when it acts.
func (d *Dashboard) readOnlyWhy() string {
	switch {
	case d.cfg.ReadOnly:
		return "Read-only: this dashboard was started read-only."
	case d.cfg.Token == "":
		return "Read-only: acting needs a token, and this dashboard has none (set " + EnvToken + " or Config.Token)."
	}
	return ""
}

// queryContext bounds the queries of one request.
func (d *Dashboard) queryContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.cfg.QueryTimeout)
}

// collections lists the task collections shown.
func (d *Dashboard) collections(ctx context.Context) ([]string, error) {
	if len(d.cfg.Collections) > 0 {
		return d.cfg.Collections, nil
	}
	names, err := d.db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("list the collections: %w", err)
	}
	var out []string
	for _, n := range names {
		if base, ok := strings.CutSuffix(n, ".meta"); ok && slices.Contains(names, base) {
			out = append(out, base)
		}
	}
	slices.Sort(out)
	return out, nil
}

// errUnknownCollection is a collection that the dashboard does not show.
var errUnknownCollection = errors.New("no such task collection")

// producer returns the producer of a shown collection.
func (d *Dashboard) producer(ctx context.Context, name string) (*mscheduler.Producer[bson.RawValue], error) {
	names, err := d.collections(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(names, name) {
		return nil, fmt.Errorf("%w: %q", errUnknownCollection, name)
	}
	d.mu.Lock()
	p, ok := d.producers[name]
	d.mu.Unlock()
	if ok {
		return p, nil
	}
	// Shown only if it is a task collection (it may be given by name, or
	// have a .meta of its own): someone's collection is not listed as
	// tasks, once per collection, read only.
	if err := mscheduler.CheckTaskCollection(ctx, d.db.Collection(name)); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.producers[name]; ok {
		return p, nil
	}
	// Params are shown, not used: bson.RawValue takes whatever a task stores.
	p, err = mscheduler.NewProducer[bson.RawValue](d.db.Collection(name), nil)
	if err != nil {
		return nil, err
	}
	d.producers[name] = p
	return p, nil
}
