// Package dbpoll polls, with one command, every task collection that the
// consumers of a process serve in one database: the discovery of a server
// without change streams. Each consumer gives the filter of the tasks it
// may claim; one aggregate reads, for each, the earliest such task's run_at
// ($unionWith, MongoDB 4.4), and each consumer is told what its own part
// found. A process serving fifty idle task collections then sends one
// query per poll interval, not fifty (nor a hundred, with the look for the
// next due time).
package dbpoll

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Probe is one consumer's part of its database's poll. Its exported fields
// are set before Open and never change; none of its funcs may block. Saw
// is never called once Close returned; Failed may be, once.
type Probe struct {
	Coll *mongo.Collection
	// Eligible is the filter of the tasks the consumer may claim, at any
	// time (no run_at clause); nil leaves the consumer out of this poll
	// (its clock is not measured yet, say).
	Eligible func() bson.D
	// Interval is how often the consumer wants its collection polled.
	Interval func() time.Duration
	// Saw is told the earliest run_at among the tasks Eligible selects,
	// after each poll that found one: due, or when one will be.
	Saw func(runAt time.Time)
	// Failed is told a poll failed, once until a poll succeeds again; the
	// consumer then polls on its own until one does (Serving). It is
	// called on the poll's goroutine: it must only note the error.
	Failed func(err error)

	sh atomic.Pointer[poller]
	// servedUntil is when the last poll that included the probe and
	// succeeded stops vouching for it (see served), as time since
	// clockStart; 0 when none does. Written by the poller's loop, read by
	// the consumer.
	servedUntil atomic.Int64
	// failing says the last poll failed and Failed was told, so that polls
	// that go on failing tell it once. Under pollers.mu.
	failing bool
}

// Serving says a poll of the database included this consumer and
// succeeded lately, and the next is not overdue: the consumer's own polls
// are a fallback. A poll that hangs on a stalled server stops vouching for
// the consumers it has not reached after two intervals and its timeout.
func (p *Probe) Serving() bool {
	return p.sh.Load() != nil && time.Since(clockStart).Nanoseconds() < p.servedUntil.Load()
}

// clockStart anchors servedUntil on the monotonic clock.
var clockStart = time.Now()

// served marks the probe served by a poll that succeeded now, for two
// intervals and a poll's timeout.
func (p *Probe) served(every time.Duration) {
	p.servedUntil.Store((time.Since(clockStart) + 2*every + pollTimeout(every)).Nanoseconds())
}

// Open joins the poll of the probe's database, starting it if this is the
// process's first consumer there. The probe is served from the next poll.
func (p *Probe) Open() { join(p) }

// Close leaves the database's poll; the last probe to leave stops it.
// Idempotent.
func (p *Probe) Close() { leave(p) }

// dbKey names a database as one client reaches it.
type dbKey struct {
	client *mongo.Client
	db     string
}

var pollers = struct {
	mu sync.Mutex // guards m, and each poller's probes
	m  map[dbKey]*poller
}{m: map[dbKey]*poller{}}

// poller is one database's poll loop and the probes it serves.
type poller struct {
	db     *mongo.Database
	key    dbKey
	probes []*Probe // under pollers.mu
	joined chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func join(p *Probe) {
	key := dbKey{client: p.Coll.Database().Client(), db: p.Coll.Database().Name()}
	// From the primary, as claims read: a secondary that lags would hide
	// tasks just published, while the consumers' own polls wait as a
	// fallback.
	db := key.client.Database(key.db, options.Database().SetReadPreference(readpref.Primary()))
	pollers.mu.Lock()
	defer pollers.mu.Unlock()
	if p.sh.Load() != nil {
		return
	}
	sh := pollers.m[key]
	if sh == nil {
		ctx, cancel := context.WithCancel(context.Background())
		sh = &poller{db: db, key: key, joined: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
		pollers.m[key] = sh
		go func() { defer close(sh.done); sh.loop(ctx) }()
	}
	sh.probes = append(sh.probes, p)
	p.servedUntil.Store(0)
	p.sh.Store(sh)
	select {
	case sh.joined <- struct{}{}:
	default:
	}
}

func leave(p *Probe) {
	pollers.mu.Lock()
	sh := p.sh.Swap(nil)
	if sh == nil {
		pollers.mu.Unlock()
		return
	}
	for i, o := range sh.probes {
		if o == p {
			sh.probes = append(sh.probes[:i:i], sh.probes[i+1:]...)
			break
		}
	}
	last := len(sh.probes) == 0
	if last {
		delete(pollers.m, sh.key)
	}
	pollers.mu.Unlock()
	if last {
		sh.cancel()
		<-sh.done
	}
}

// snapshot is the probes served now, and the shortest interval they ask.
func (sh *poller) snapshot() ([]*Probe, time.Duration) {
	pollers.mu.Lock()
	probes := append([]*Probe(nil), sh.probes...)
	pollers.mu.Unlock()
	every := time.Duration(0)
	for _, p := range probes {
		if d := p.Interval(); every == 0 || d < every {
			every = d
		}
	}
	return probes, every
}

// loop polls until ctx is done: at once when a probe joins (its consumer
// counts on the poll from then on), then every shortest interval, ±20%.
func (sh *poller) loop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sh.joined:
		case <-timer.C:
		}
		probes, every := sh.snapshot()
		sh.poll(ctx, probes, every)
		timer.Reset(time.Duration(float64(every) * (0.8 + 0.4*rand.Float64())))
	}
}

// maxPerCommand bounds the parts of one aggregate: its pipeline grows by
// a filter per part, and a process with more task collections sends more
// commands, each well under the server's document limit.
const maxPerCommand = 64

// pollTimeout bounds one poll: its reply is a document per part at most.
func pollTimeout(every time.Duration) time.Duration { return max(every, 10*time.Second) }

// poll reads every probe's part, maxPerCommand at a time, and tells each
// what it found.
func (sh *poller) poll(ctx context.Context, probes []*Probe, every time.Duration) {
	for len(probes) > 0 && ctx.Err() == nil {
		n := min(len(probes), maxPerCommand)
		sh.pollSome(ctx, probes[:n], every)
		probes = probes[n:]
	}
}

func (sh *poller) pollSome(ctx context.Context, probes []*Probe, every time.Duration) {
	var parts []*Probe
	var pipeline mongo.Pipeline
	for _, p := range probes {
		filter := p.Eligible()
		if filter == nil {
			p.servedUntil.Store(0) // left out: it polls on its own
			continue
		}
		stages := partStages(filter, len(parts))
		if len(parts) == 0 {
			pipeline = stages
		} else {
			pipeline = append(pipeline, bson.D{{Key: "$unionWith", Value: bson.D{
				{Key: "coll", Value: p.Coll.Name()},
				{Key: "pipeline", Value: stages},
			}}})
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, pollTimeout(every))
	defer cancel()
	found, err := sh.run(pctx, parts[0].Coll.Name(), pipeline)
	if ctx.Err() != nil {
		return
	}
	for _, p := range sh.tell(parts, found, err, every) {
		p.Failed(err)
	}
}

// tell gives each probe still joined what its part found, and marks it
// serving or not; it returns the probes to tell of err, which are told
// outside the lock (Failed may log and call out). Under the lock, so that
// no probe is told what it saw once its Close returned.
func (sh *poller) tell(parts []*Probe, found map[int]time.Time, err error, every time.Duration) (failed []*Probe) {
	pollers.mu.Lock()
	defer pollers.mu.Unlock()
	for i, p := range parts {
		if p.sh.Load() != sh {
			continue
		}
		if err != nil {
			p.servedUntil.Store(0)
			if !p.failing {
				failed = append(failed, p)
			}
			p.failing = true
			continue
		}
		p.served(every)
		p.failing = false
		if at, ok := found[i]; ok {
			p.Saw(at)
		}
	}
	return failed
}

// partStages is the pipeline of one probe's part: its earliest eligible
// task's run_at, tagged with the part's index. Only dates, and no array:
// a run_at set by hand to a number or a string sorts before every date,
// and so does an array that holds one beside a date, which $type "date"
// matches; either would hide the tasks due.
func partStages(filter bson.D, tag int) mongo.Pipeline {
	runAt := bson.D{{Key: "$type", Value: "date"}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "array"}}}}
	match := append(append(bson.D{}, filter...), bson.E{Key: stored.FRunAt, Value: runAt})
	return mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$sort", Value: bson.D{{Key: stored.FRunAt, Value: 1}}}},
		{{Key: "$limit", Value: 1}},
		{{Key: "$project", Value: bson.D{{Key: stored.FID, Value: 0}, {Key: stored.FRunAt, Value: 1}}}},
		{{Key: "$addFields", Value: bson.D{{Key: partTag, Value: tag}}}},
	}
}

// partTag names the field that says which part a document answers.
const partTag = "part"

// run runs the poll's aggregate on coll and returns the earliest run_at
// found by each part, by index.
func (sh *poller) run(ctx context.Context, coll string, pipeline mongo.Pipeline) (map[int]time.Time, error) {
	cur, err := sh.db.Collection(coll).Aggregate(ctx, pipeline)
	if err != nil {
		return nil, fmt.Errorf("mscheduler: poll the task collections of %s: %w", sh.db.Name(), err)
	}
	defer cur.Close(context.Background())
	found := map[int]time.Time{}
	for cur.Next(ctx) {
		tag, ok := cur.Current.Lookup(partTag).AsInt64OK()
		at, isTime := cur.Current.Lookup(stored.FRunAt).TimeOK()
		if ok && isTime {
			found[int(tag)] = at
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("mscheduler: poll the task collections of %s: %w", sh.db.Name(), err)
	}
	return found, nil
}
