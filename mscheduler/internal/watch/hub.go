package watch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// The consumers of one process share one change stream per database: a
// process serving fifty task collections holds one cursor, whose getMore
// waits on the server for all of them, not fifty. Each event goes to the
// consumers of the collection it names.

// dbKey names a database as one client reaches it.
type dbKey struct {
	client *mongo.Client
	db     string
}

// hub holds the shared streams of the process.
var hub = struct {
	mu      sync.Mutex // guards streams, and each shared's subs and refs
	streams map[dbKey]*shared
}{streams: map[dbKey]*shared{}}

// shared is one database's stream and the consumers it serves.
type shared struct {
	db *mongo.Database
	// subs are the consumers by collection name (under hub.mu); the loop
	// reads them under hub.mu too.
	subs   map[string][]*Stream
	refs   int
	open   atomic.Bool // written by its loop, read by the claim loops
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returns
}

// join adds s to its database's stream, opening the stream if s is the
// first of the database; an error opening it is returned, and s joins
// nothing.
func (s *Stream) join(ctx context.Context) error {
	db := s.Coll.Database()
	key := dbKey{client: db.Client(), db: db.Name()}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	sh := hub.streams[key]
	if sh == nil {
		// Opened under the lock: consumers started together wait for the
		// first one's open rather than each opening one.
		cs, err := db.Watch(ctx, dbPipeline(), streamOptions())
		if err != nil {
			return err
		}
		loopCtx, cancel := context.WithCancel(context.Background())
		sh = &shared{db: db, subs: map[string][]*Stream{}, cancel: cancel, done: make(chan struct{})}
		sh.open.Store(true)
		hub.streams[key] = sh
		go func() { defer close(sh.done); sh.loop(loopCtx, cs) }()
	}
	sh.subs[s.Coll.Name()] = append(sh.subs[s.Coll.Name()], s)
	sh.refs++
	s.sh.Store(sh)
	s.key = key
	return nil
}

// leave removes s from its database's stream; the last to leave closes
// the stream and waits for its loop to end.
func (s *Stream) leave() {
	hub.mu.Lock()
	sh := s.sh.Load()
	if sh == nil {
		hub.mu.Unlock()
		return
	}
	s.sh.Store(nil)
	name := s.Coll.Name()
	subs := sh.subs[name]
	for i, o := range subs {
		if o == s {
			subs = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(sh.subs, name)
	} else {
		sh.subs[name] = subs
	}
	sh.refs--
	last := sh.refs == 0
	if last {
		delete(hub.streams, s.key)
	}
	hub.mu.Unlock()
	if last {
		sh.cancel()
		<-sh.done
	}
}

// dbPipeline is Pipeline for a database's stream: the events of the
// library's own collections beside each task collection (its history and
// its consumers' registry) are not of tasks.
func dbPipeline() mongo.Pipeline {
	own := bson.D{{Key: "ns.coll", Value: taskstate.Op("$not", bson.Regex{Pattern: `\.(meta|runs)$`})}}
	return append(mongo.Pipeline{{{Key: "$match", Value: own}}}, Pipeline()...)
}

// streamAwait is how long the server holds a getMore of the stream with no
// event to return: an event returns at once, so it costs no latency, and a
// process whose task collections are quiet sends one getMore every
// streamAwait (the server's default is a second). The getMore holds one
// connection of the client's pool meanwhile.
const streamAwait = 5 * time.Second

func streamOptions() *options.ChangeStreamOptionsBuilder {
	return options.ChangeStream().SetMaxAwaitTime(streamAwait)
}

// While every consumer of the stream has all its slots taken, no wake can
// start a claim, and the stream reads no further: the events wait on the
// server, and the next getMore takes them together, once a slot frees
// (which wakes its consumer by itself) or busyPause has passed, so that a
// cancel still reaches the runs going within it. On a busy collection the
// getMores, one per event batch and process, were otherwise as many as the
// claims, pings and run ends together.
const (
	busyPause = time.Second
	busyLook  = 20 * time.Millisecond
)

// awaitIdle waits, before a getMore (the batch read is spent), until a
// consumer of the stream has a free slot or busyPause has passed. It
// reports false when ctx is done.
func (sh *shared) awaitIdle(ctx context.Context, cs *mongo.ChangeStream) bool {
	if cs.RemainingBatchLength() > 0 {
		return true
	}
	deadline := time.Now().Add(busyPause)
	for !sh.anyIdle() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(busyLook):
		}
	}
	return ctx.Err() == nil
}

// anyIdle says a consumer of the stream has a free slot.
func (sh *shared) anyIdle() bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for _, subs := range sh.subs {
		for _, s := range subs {
			if s.Idle == nil || s.Idle() {
				return true
			}
		}
	}
	return len(sh.subs) == 0
}

// deliver hands an event to the consumers of the collection it names,
// or to all of them for an event that names none. Under the hub's lock,
// so that a consumer gets no event once Close returned.
func (sh *shared) deliver(event bson.Raw) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if coll, ok := event.Lookup("ns", "coll").StringValueOK(); ok {
		for _, s := range sh.subs[coll] {
			s.OnChange(event)
		}
		return
	}
	for _, subs := range sh.subs {
		for _, s := range subs {
			s.OnChange(event)
		}
	}
}

// all is every consumer the stream serves now.
func (sh *shared) all() []*Stream {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	var all []*Stream
	for _, subs := range sh.subs {
		all = append(all, subs...)
	}
	return all
}

// loop delivers the events of cs until ctx is done. After an error it
// resumes from the last token; if the server cannot resume (the token fell
// out of its oplog), it opens a new stream and wakes every consumer, so
// that the changes it missed are found by a query.
func (sh *shared) loop(ctx context.Context, cs *mongo.ChangeStream) {
	defer sh.open.Store(false)
	for {
		for sh.awaitIdle(ctx, cs) && cs.Next(ctx) {
			sh.deliver(cs.Current)
		}
		token := cs.ResumeToken()
		err := cs.Err()
		_ = cs.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		sh.open.Store(false)
		sh.tellAll(ctx, fmt.Errorf("mscheduler: change stream: %w", err))
		if cs = sh.reopen(ctx, token); cs == nil {
			return
		}
		sh.open.Store(true)
		for _, s := range sh.all() {
			s.Wake()
		}
	}
}

// tellAll reports err to every consumer, and wakes them: they poll until
// the stream is back.
func (sh *shared) tellAll(ctx context.Context, err error) {
	for _, s := range sh.all() {
		s.Error(ctx, err)
		s.Wake()
	}
}

// reopen opens the stream again, from token if the server still has it,
// until it opens or ctx is done (then nil).
func (sh *shared) reopen(ctx context.Context, token bson.Raw) *mongo.ChangeStream {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ReopenDelay):
		}
		opts := streamOptions()
		if token != nil {
			opts.SetResumeAfter(token)
		}
		cs, err := sh.db.Watch(ctx, dbPipeline(), opts)
		if err == nil {
			return cs
		}
		sh.tellAll(ctx, fmt.Errorf("mscheduler: reopen change stream: %w", err))
		token = nil // a token the server rejected is not tried again
	}
}
