package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Pages stay live through "events", a stream of server-sent events that
// says when what they show may have changed; the page then fetches itself
// again (static/live.js). Every page of a Dashboard shares one hub, and the
// hub one source: a change stream of the database where the server has
// them, else a tick.
const (
	// tickInterval paces the pages when the server has no change streams,
	// or while the stream is down.
	tickInterval = 2 * time.Second
	// coalesceWindow: a page gets at most one change event per window.
	coalesceWindow = 500 * time.Millisecond
	// heartbeatInterval: a comment line keeps proxies from closing an idle
	// stream.
	heartbeatInterval = 15 * time.Second
	// writeTimeout bounds each write to a page, whatever the server's
	// WriteTimeout (which would end every stream).
	writeTimeout = 10 * time.Second
	// retryMS is how soon a browser reconnects a dropped stream.
	retryMS = 2000
)

// A changeSource tells the hub when what the pages show may have changed:
// it calls changed for each change until ctx ends, then returns.
type changeSource func(ctx context.Context, changed func())

// hub runs one source while at least one page listens, and passes its
// changes on to every page.
type hub struct {
	source changeSource

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	stop context.CancelFunc // ends the running source; nil when none runs
	done chan struct{}      // closed when the running source has returned
}

func newHub(source changeSource) *hub {
	return &hub{source: source, subs: map[chan struct{}]struct{}{}}
}

// subscribe adds a page: its channel holds one pending change. The first
// page starts the source. leave removes the page; the last one stops the
// source and waits for it to return.
func (h *hub) subscribe() (changes <-chan struct{}, leave func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	if h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		h.stop, h.done = cancel, done
		go func() {
			defer close(done)
			h.source(ctx, h.broadcast)
		}()
	}
	return ch, func() { h.leave(ch) }
}

func (h *hub) leave(ch chan struct{}) {
	h.mu.Lock()
	delete(h.subs, ch)
	var done chan struct{}
	if len(h.subs) == 0 && h.stop != nil {
		h.stop()
		done = h.done
		h.stop, h.done = nil, nil
	}
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// broadcast never waits for a page: one that has not taken the last
// change yet misses this one, which the pending one stands for.
func (h *hub) broadcast() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// running reports whether the source runs, for the tests.
func (h *hub) running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stop != nil
}

// events serves the "events" stream of a Dashboard's pages.
type events struct {
	hub  *hub
	max  int          // streams open at once at most
	open atomic.Int64 // streams open now

	mu        sync.Mutex
	shutdowns map[*http.Server]chan struct{} // closed when that server shuts down (a few servers at most)
}

func newEvents(source changeSource, max int) *events {
	return &events{hub: newHub(source), max: max, shutdowns: map[*http.Server]chan struct{}{}}
}

// newDashboardEvents is the events of d, from its database.
func newDashboardEvents(d *Dashboard) *events {
	return newEvents((&dbSource{d: d, tick: tickInterval}).changes, d.cfg.MaxEventStreams)
}

// serve streams "change" events to one page until it goes away.
func (e *events) serve(w http.ResponseWriter, r *http.Request) {
	if e.open.Add(1) > int64(e.max) {
		e.open.Add(-1)
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("too many live pages open (%d): this one is not updated live", e.max), http.StatusServiceUnavailable)
		return
	}
	defer e.open.Add(-1)
	// Subscribed before the stream opens: the page reads itself again on
	// opening (live.js), and no change after that is missed.
	changes, leave := e.hub.subscribe()
	defer leave()
	// Before the page sees a reply: a Shutdown begun after that runs the
	// hooks registered by then, this one's included.
	shutdown := e.closing(r)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	if err := rc.Flush(); errors.Is(err, http.ErrNotSupported) {
		http.Error(w, "this server cannot stream events; poll the page instead", http.StatusNotImplemented)
		return
	}
	send := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // not every writer has deadlines
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(fmt.Sprintf("retry: %d\n\n", retryMS)) {
		return
	}
	heartbeat := time.NewTicker(heartbeatInterval)
	defer heartbeat.Stop()
	in := changes               // nil during a coalescing window, when changes wait in the channel
	var window <-chan time.Time // ends the coalescing window
	for {
		select {
		case <-r.Context().Done():
			return
		case <-shutdown:
			return
		case <-in:
			if !send("event: change\ndata: change\n\n") {
				return
			}
			in, window = nil, time.After(coalesceWindow)
		case <-window:
			in, window = changes, nil
		case <-heartbeat.C:
			if !send(": heartbeat\n\n") {
				return
			}
		}
	}
}

// closing returns a channel closed when the server of r shuts down:
// http.Server.Shutdown waits for every request to end, and a stream ends
// only when told.
func (e *events) closing(r *http.Request) <-chan struct{} {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.shutdowns[srv]
	if !ok {
		ch = make(chan struct{})
		e.shutdowns[srv] = ch
		srv.RegisterOnShutdown(func() { close(ch) }) // kept closed: a late request ends at once
	}
	return ch
}

// dbSource is the source on the dashboard's database: a change stream of
// the database, kept to the shown task collections and the worker
// registry, where the server has change streams; else a tick.
type dbSource struct {
	d    *Dashboard
	tick time.Duration

	noStreams atomic.Bool // the server refused a change stream: tick from then on
	streamed  atomic.Bool // a stream opened once: a later refusal is a failure, not a server without them
}

func (s *dbSource) changes(ctx context.Context, changed func()) {
	ticker := time.NewTicker(s.tick)
	defer ticker.Stop()
	var token bson.Raw
	for {
		if !s.noStreams.Load() {
			token = s.watch(ctx, changed, token) // returns when the stream fails or ctx ends
			ticker.Reset(s.tick)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			changed()
		}
	}
}

// watch passes on the changes of a change stream from token (or from now)
// until the stream fails or ctx ends, and returns where to resume.
func (s *dbSource) watch(ctx context.Context, changed func(), token bson.Raw) bson.Raw {
	for ctx.Err() == nil {
		names, discover, err := s.watched(ctx)
		if err != nil {
			s.d.cfg.Logger.Warn("dashboard: list the collections to watch; pages refresh every 2 s meanwhile", "error", err)
			return token
		}
		opts := options.ChangeStream() // no fullDocument: only the namespace is read
		if token != nil {
			opts.SetStartAfter(token)
		}
		openCtx, cancel := context.WithTimeout(ctx, s.d.cfg.QueryTimeout)
		cs, err := s.d.db.Watch(openCtx, streamPipeline(names, discover), opts)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.failed(err)
			}
			return nil // a token the server rejected is not tried again
		}
		s.streamed.Store(true)
		if token == nil {
			changed() // what changed before the stream opened is read again
		}
		reopen := false
		for !reopen && cs.Next(ctx) {
			changed()
			reopen = discover && isNewCollection(cs.Current, names)
		}
		token, err = cs.ResumeToken(), cs.Err()
		closeCtx, cancel := context.WithTimeout(context.Background(), s.d.cfg.QueryTimeout)
		_ = cs.Close(closeCtx)
		cancel()
		if !reopen {
			if ctx.Err() == nil {
				s.d.cfg.Logger.Warn("dashboard: change stream failed; pages refresh every 2 s until it reopens", "error", err)
			}
			return token
		}
		// A new task collection: watch it too, from just after the event.
	}
	return token
}

// failed takes a change stream that could not open. The server's first
// refusal says it has no change streams (a standalone server, the
// development server): the pages tick from then on. Anything else is tried
// again at the next tick.
func (s *dbSource) failed(err error) {
	var se mongo.ServerError
	if !s.streamed.Load() && errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err) {
		s.noStreams.Store(true)
		s.d.cfg.Logger.Info("dashboard: no change streams on this server; pages refresh every 2 s", "reason", err)
		return
	}
	s.d.cfg.Logger.Warn("dashboard: open a change stream; pages refresh every 2 s meanwhile", "error", err)
}

// watched lists the task collections the stream follows: Config.Collections,
// or, when they are discovered, every one with its metadata beside it
// (created or not yet), and then discover says to follow new metadata too.
func (s *dbSource) watched(ctx context.Context) (names []string, discover bool, err error) {
	if len(s.d.cfg.Collections) > 0 {
		return s.d.cfg.Collections, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.d.cfg.QueryTimeout)
	defer cancel()
	all, err := s.d.db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: bson.D{{Key: "$regex", Value: `\.meta$`}}}})
	if err != nil {
		return nil, false, err
	}
	for _, n := range all {
		names = append(names, strings.TrimSuffix(n, ".meta"))
	}
	return names, true, nil
}

// streamPipeline keeps the operations on the task collections and the
// worker registry (and, with discover, on any collection's metadata, which
// a new task collection writes first), and only their namespace. The run
// history needs no watching: a run's record is written before the task's
// own last write of that run (which removes its unlogged mark).
func streamPipeline(names []string, discover bool) mongo.Pipeline {
	colls := append(slices.Clone(names), mscheduler.WorkersCollection)
	match := bson.D{{Key: "ns.coll", Value: bson.D{{Key: "$in", Value: colls}}}}
	if discover {
		match = bson.D{{Key: "$or", Value: bson.A{match,
			bson.D{{Key: "ns.coll", Value: bson.D{{Key: "$regex", Value: `\.meta$`}}}}}}}
	}
	return mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$project", Value: bson.D{{Key: "ns", Value: 1}}}}, // _id, the resume token, stays
	}
}

// isNewCollection reports a change to the metadata of a task collection
// the stream does not follow yet.
func isNewCollection(event bson.Raw, names []string) bool {
	coll, _ := event.Lookup("ns", "coll").StringValueOK()
	base, ok := strings.CutSuffix(coll, ".meta")
	return ok && !slices.Contains(names, base)
}
