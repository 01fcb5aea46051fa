package mscheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Idle workers poll, look for the next due task and sweep on timers, so
// that without a change stream N of them would cost the server N times
// what one costs while none has work. Consumers therefore announce
// themselves in the collection's metadata ({_id: "consumers"} in
// <name>.meta: the server time each was last seen, by worker id) every
// maintenance interval, learn from the reply how many are alive, and with N
// alive and PollBudget B < N each polls and sweeps N/B times less often.
// Together they then cost what B consumers cost, and a task published by
// another process is still found within PollInterval/B on average: the
// collection is polled B times per PollInterval, by whoever comes first.

const consumersID = "consumers"

// consumersDocID is the document where consumers of the same groups
// announce themselves: a consumer serving groups shares the claimable
// tasks of those groups with its like only, so only they count as peers.
func consumersDocID(groups []string) string {
	if len(groups) == 0 {
		return consumersID
	}
	sorted := slices.Clone(groups)
	slices.Sort(sorted)
	return consumersID + ":" + strings.Join(slices.Compact(sorted), ",")
}

// maxForget bounds the entries one maintenance pass removes, so that a
// document filled by hand with entries does not make the command too big.
const maxForget = 500

// PollBudgetDefault is the default ConsumerConfig.PollBudget.
const PollBudgetDefault = 2

// NoPollBudget, as ConsumerConfig.PollBudget, has every consumer poll and
// sweep at its own intervals however many there are.
const NoPollBudget = -1

// peerLapse is how many maintenance intervals a consumer may go unseen
// before it no longer counts as alive; the maintenance holder removes it.
const peerLapse = 3

// announceSoon bounds the wait for the second announce, so that workers
// started together learn of each other soon, not a maintenance interval
// later.
const announceSoon = 5 * time.Second

// announceIfDue announces this consumer when its time has come: at start,
// then once more within announceSoon, then every MaintenanceInterval, and
// when the last claim brought it forward (see viewMayBeStale); after a
// failure, within announceSoon. Run by the claim loop.
func (c *Consumer[P, R]) announceIfDue(ctx context.Context, st *claimState) {
	now := c.clock.Now()
	if now.Before(st.announceAt) {
		return
	}
	every := c.cfg.MaintenanceInterval
	if st.announceAt.IsZero() {
		every = min(every, announceSoon)
	}
	st.announceAt, st.announced = now.Add(jitter(every)), now
	view, err := c.announce(ctx, now)
	if err != nil {
		// The last view is the better guess: alone, this consumer would
		// take every share at once. Soon again, as at start.
		c.loopError(ctx, err)
		st.announceAt = now.Add(jitter(min(every, announceSoon)))
		return
	}
	if view.alive != st.peers || view.rank != st.rank {
		st.spares.Drop() // chosen by shares that moved
	}
	st.peers, st.rank, st.peersGone = view.alive, view.rank, view.gone
}

// reannounceGap bounds how often claims that lost tasks bring the next
// announce forward.
const reannounceGap = time.Second

// viewMayBeStale brings the next announce forward when the last claim
// says the view of the consumers alive, which the shares rest on, may be
// stale: the first claim that found work waiting (consumers started
// together announced one after the other, the first knowing of few of the
// others), and a batch claim that lost tasks, once reannounceGap has
// passed since the last announce (a consumer joined since, and took tasks
// of the share this one still thinks its own).
func (st *claimState) viewMayBeStale(now time.Time) {
	first := st.backlog && !st.workFound
	st.workFound = st.workFound || st.backlog
	if (first || st.lostTasks && now.Sub(st.announced) >= reannounceGap) && now.Before(st.announceAt) {
		st.announceAt = now
	}
	st.lostTasks = false
}

// peerView is what an announce learns of the consumers of the collection.
type peerView struct {
	alive int      // consumers alive, this one included (at least 1)
	rank  int      // how many of them have a worker id before this one's
	gone  []string // consumers seen lapsed, or with a value not a date
}

// announce records this consumer as seen now and returns what it learns
// of the consumers of the collection. One command; a metadata document
// edited into the wrong shape is replaced.
func (c *Consumer[P, R]) announce(ctx context.Context, now time.Time) (peerView, error) {
	meta := metaCollection(c.coll)
	filter := bson.D{{Key: fID, Value: consumersDocID(c.cfg.Groups)}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "seen." + c.cfg.WorkerID, Value: now}}}}
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	raw, err := meta.FindOneAndUpdate(ctx, filter, update, opts).Raw()
	if mongo.IsDuplicateKeyError(err) {
		// Another consumer created the document first: it is there now.
		raw, err = meta.FindOneAndUpdate(ctx, filter, update, opts).Raw()
	}
	if err != nil && isServerRefusal(err) && !c.seenIsDocument(ctx, filter) {
		// seen is not a document: start it again. Others come back at
		// their next announce.
		c.log.Warn("the consumers document of the collection's metadata cannot be updated; replacing it", "error", err)
		fresh := bson.D{{Key: "seen", Value: bson.D{{Key: c.cfg.WorkerID, Value: now}}}}
		_, err = meta.ReplaceOne(ctx, filter, fresh, options.Replace().SetUpsert(true))
		return peerView{alive: 1}, wrapPeers(err)
	}
	if err != nil {
		return peerView{alive: 1}, wrapPeers(err)
	}
	view := countPeers(raw, c.aliveWindow(now), c.cfg.WorkerID)
	view.alive = max(view.alive, 1)
	return view, nil
}

// seenIsDocument says the consumers document could be read and its seen
// is a document (or missing): a refusal was not about its shape.
func (c *Consumer[P, R]) seenIsDocument(ctx context.Context, filter bson.D) bool {
	raw, err := metaCollection(c.coll).FindOne(ctx, filter).Raw()
	if err != nil {
		return true // not known: leave it
	}
	t := raw.Lookup("seen").Type
	return t == 0 || t == bson.TypeEmbeddedDocument
}

func wrapPeers(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mscheduler: announce the consumer: %w", err)
}

// window is a range of server times, both ends included.
type window struct{ from, to time.Time }

func (w window) holds(t time.Time) bool { return !t.Before(w.from) && !t.After(w.to) }

// aliveWindow is when a consumer alive at now was last seen: within
// peerLapse maintenance intervals, and not later than one interval ahead
// (consumers' clocks are the server's, give or take a round trip; a time
// further ahead was edited by hand and would count for ever).
func (c *Consumer[P, R]) aliveWindow(now time.Time) window {
	return window{now.Add(-peerLapse * c.cfg.MaintenanceInterval), now.Add(c.cfg.MaintenanceInterval)}
}

// countPeers counts the consumers seen within alive, and those of them
// before self in worker id order, and returns the others as gone (seen
// outside it, or with a value that is not a date).
func countPeers(raw bson.Raw, alive window, self string) (view peerView) {
	seen, ok := raw.Lookup("seen").DocumentOK()
	if !ok {
		return view
	}
	elems, _ := seen.Elements()
	for _, e := range elems {
		at, ok := e.Value().TimeOK()
		switch {
		case ok && alive.holds(at):
			view.alive++
			if e.Key() < self {
				view.rank++
			}
		case ValidateWorkerID(e.Key()) == nil: // others cannot be named in an update
			view.gone = append(view.gone, e.Key())
		}
	}
	return view
}

// forgetPeers removes consumers gone from the consumers document, so
// that it stays as small as the workers alive; given the window when a
// consumer alive was seen, only if none of them is in it now (one that
// came back stays).
func (c *Consumer[P, R]) forgetPeers(ctx context.Context, gone []string, alive *window) error {
	if len(gone) == 0 {
		return nil
	}
	gone = gone[:min(len(gone), maxForget)]
	filter := bson.D{{Key: fID, Value: consumersDocID(c.cfg.Groups)}}
	unset := make(bson.D, 0, len(gone))
	back := make(bson.A, 0, len(gone))
	for _, id := range gone {
		unset = append(unset, bson.E{Key: "seen." + id, Value: ""})
		if alive != nil {
			back = append(back, bson.D{{Key: "seen." + id, Value: bson.D{{Key: "$gte", Value: alive.from}, {Key: "$lte", Value: alive.to}}}})
		}
	}
	if alive != nil {
		filter = append(filter, bson.E{Key: "$nor", Value: back})
	}
	_, err := metaCollection(c.coll).UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: unset}})
	if err != nil {
		return fmt.Errorf("mscheduler: forget consumers gone: %w", err)
	}
	return nil
}

// spreadOut stretches an interval d by peers/PollBudget, when more than
// PollBudget consumers are alive.
func (c *Consumer[P, R]) spreadOut(d time.Duration, peers int) time.Duration {
	b := c.cfg.PollBudget
	if b == NoPollBudget || peers <= b {
		return d
	}
	return d * time.Duration(peers) / time.Duration(b)
}
