package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FerretDB 1.24 has no change streams. The front emulates them: it answers aggregate with a
// first stage $changeStream, and getMore and killCursors on the cursors that opens, itself. While
// a stream covers a namespace, the front reads what each write there changes (streamcapture.go)
// and keeps the changes in a bounded history that the streams read from.

// streamConfig configures the change streams.
type streamConfig struct {
	// historySize is how many changes the history keeps; a stream that falls further behind, or
	// resumes from a token older than that, fails with ChangeStreamHistoryLost.
	historySize int
	// linger is how long writes to a namespace are still read after its last stream closed, so
	// that a stream closed and resumed from its token (as drivers do after an error, and as the
	// dashboard does to follow a new collection) misses nothing. A resume after that fails with
	// ChangeStreamHistoryLost.
	linger time.Duration
	// idleTimeout closes a stream cursor that no getMore used for that long, as MongoDB times out
	// cursors (cursorTimeoutMillis); a client that died does not keep the writes read for ever.
	idleTimeout time.Duration
}

func defaultStreamConfig() streamConfig {
	return streamConfig{historySize: 10_000, linger: time.Minute, idleTimeout: 10 * time.Minute}
}

// streamCursorBase is the first cursor id of the streams: FerretDB's cursor ids count up from 1,
// so the two never meet.
const streamCursorBase = int64(1) << 48

// defaultAwait is how long a getMore without maxTimeMS waits for events, as on MongoDB.
const defaultAwait = time.Second

// streams is the front's change stream service.
type streams struct {
	cfg    streamConfig
	hist   *history
	lock   sync.Locker // the front's exchangeMu: no write is in flight while it is held
	logger *slog.Logger
	done   chan struct{} // closed when the front stops: waiting getMores return at once

	mu       sync.Mutex
	cursors  map[int64]*stream
	coverage map[scope]*coverage
	lastID   int64

	// active counts coverage entries: while it is zero, no write needs looking at.
	active atomic.Int32

	waiting  atomic.Int32 // getMores waiting for events, for tests
	timeouts atomic.Int64 // getMores that ended empty at their maxTimeMS, for tests
}

// scope is what a stream watches: a collection, a database (coll empty), or every database.
type scope struct {
	db, coll string
	cluster  bool
}

// covers says whether a change to db.coll is in the scope; coll is empty for a whole database.
func (s scope) covers(db, coll string) bool {
	return s.cluster || s.db == db && (s.coll == "" || coll == "" || s.coll == coll)
}

// contains says whether every change in inner is in s.
func (s scope) contains(inner scope) bool {
	switch {
	case s.cluster:
		return true
	case inner.cluster || s.db != inner.db:
		return false
	}
	return s.coll == "" || s.coll == inner.coll
}

// coverage is an unbroken span of writes read for a scope: every write in the scope since
// position from (a history sequence number) is in the history.
type coverage struct {
	from     uint64
	fromTime bson.Timestamp
	open     int       // streams of this scope
	until    time.Time // when open is zero: when the span ends
}

func newStreams(cfg streamConfig, lock sync.Locker, logger *slog.Logger) *streams {
	return &streams{
		cfg:      cfg,
		hist:     newHistory(cfg.historySize),
		lock:     lock,
		logger:   logger,
		done:     make(chan struct{}),
		cursors:  make(map[int64]*stream),
		coverage: make(map[scope]*coverage),
		lastID:   streamCursorBase,
	}
}

// run closes idle cursors until ctx is done, then wakes every waiting getMore.
func (s *streams) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(min(s.cfg.idleTimeout/4+time.Millisecond, 30*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			s.closeIdle(now)
		}
	}
}

func (s *streams) closeIdle(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.cursors {
		if now.Sub(st.lastUsed()) > s.cfg.idleTimeout {
			s.closeLocked(id)
		}
	}
}

// coversWrites says a stream covers the writes to db.coll now; false on a nil s.
func (s *streams) coversWrites(db, coll string) bool {
	return s != nil && s.active.Load() != 0 && s.covered(db, coll)
}

// covered returns the scopes' coverage that a write to db.coll needs to be read for; coll empty
// means any collection of db. It ends the spans that lapsed.
func (s *streams) covered(db, coll string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	found := false
	for sc, c := range s.coverage {
		if c.open == 0 && now.After(c.until) {
			delete(s.coverage, sc)
			s.active.Add(-1)
			continue
		}
		found = found || sc.covers(db, coll)
	}
	return found
}

// coveredSince says whether every write in sc after position pos (or at or after cluster time
// t, when pos is zero and t is not) is in the history; s.mu is held.
func (s *streams) coveredSinceLocked(sc scope, pos uint64, t bson.Timestamp) bool {
	now := time.Now()
	for csc, c := range s.coverage {
		if c.open == 0 && now.After(c.until) {
			continue
		}
		if !csc.contains(sc) {
			continue
		}
		if t.IsZero() && c.from <= pos || !t.IsZero() && c.fromTime.Before(t) {
			return true
		}
	}
	return false
}

// attachLocked counts a new stream of sc, starting a span of coverage if there is none; s.mu is
// held, and so is the front's exchangeMu, so no write is half read.
func (s *streams) attachLocked(sc scope) {
	c, ok := s.coverage[sc]
	if !ok {
		s.active.Add(1)
	}
	if !ok || c.open == 0 && time.Now().After(c.until) { // a span that lapsed does not go on
		// Writes before the span were not recorded: a mark takes a position of its own, so
		// that no token from before it counts as covered.
		s.hist.append([]*change{{op: opGap}})
		pos, t := s.hist.position()
		c = &coverage{from: pos, fromTime: t}
		s.coverage[sc] = c
	}
	c.open++
}

// closeLocked closes a cursor; s.mu is held.
func (s *streams) closeLocked(id int64) bool {
	st, ok := s.cursors[id]
	if !ok {
		return false
	}
	delete(s.cursors, id)
	close(st.killed)
	if c := s.coverage[st.scope]; c != nil {
		if c.open--; c.open == 0 {
			c.until = time.Now().Add(s.cfg.linger)
		}
	}
	return true
}

func (s *streams) close(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked(id)
}

func (s *streams) cursor(id int64) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[id]
}

// answer serves req itself when it is a change stream's: an aggregate that opens one, a getMore
// or killCursors of a stream cursor. It returns the reply (nil for a request with moreToCome)
// and true, or false for any other message, which goes to the backend.
func (s *streams) answer(req []byte) ([]byte, bool) {
	name := peekCommandName(req)
	if !oneOf(name, "aggregate", "getMore", "killCursors") {
		return nil, false
	}
	cmd, ok := parseCommand(req)
	if !ok {
		return nil, false
	}
	var doc bson.D
	var err error
	switch name {
	case "aggregate":
		if !isChangeStream(cmd) {
			return nil, false
		}
		doc, err = s.open(cmd)
	case "getMore":
		if id, _ := cmd.body.Lookup("getMore").AsInt64OK(); id < streamCursorBase {
			return nil, false
		}
		doc, err = s.getMore(cmd)
	default:
		if !slices.ContainsFunc(cursorIDs(cmd), func(id int64) bool { return id >= streamCursorBase }) {
			return nil, false
		}
		doc = s.killCursors(cmd)
	}
	if err != nil {
		doc = errorDoc(err)
	}
	if cmd.flags&flagMoreToCome != 0 {
		return nil, true
	}
	return opMsgBytes(cmd.requestID, mustMarshal(doc)), true
}
