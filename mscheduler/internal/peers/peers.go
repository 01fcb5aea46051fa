// Package peers keeps the consumers of a task collection aware of one
// another: each announces itself in the collection's metadata and learns
// how many are alive and its rank among them, from which the claims choose
// apart and idle consumers spread their polls.
package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Registry is one consumer's entry among the consumers of a collection
// that serve the same groups.
type Registry struct {
	Meta     *mongo.Collection // the collection's metadata
	WorkerID string
	Groups   []string
	Log      *slog.Logger
}

func (r *Registry) docID() string { return consumersDocID(r.Groups) }

// validID says a worker id can be named in an update path.
func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, ".\x00") && !strings.HasPrefix(id, "$") && utf8.ValidString(id)
}

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

// peerView is what an announce learns of the consumers of the collection.
type View struct {
	Alive int      // consumers alive, this one included (at least 1)
	Rank  int      // how many of them have a worker id before this one's
	Gone  []string // consumers seen lapsed, or with a value not a date
}

// Announce records this consumer as seen now and returns what it learns
// of the consumers of the collection. One command; a metadata document
// edited into the wrong shape is replaced.
func (r *Registry) Announce(ctx context.Context, now time.Time, alive Window) (View, error) {
	meta := r.Meta
	filter := bson.D{{Key: stored.FID, Value: r.docID()}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "seen." + r.WorkerID, Value: now}}}}
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	raw, err := meta.FindOneAndUpdate(ctx, filter, update, opts).Raw()
	if mongo.IsDuplicateKeyError(err) {
		// Another consumer created the document first: it is there now.
		raw, err = meta.FindOneAndUpdate(ctx, filter, update, opts).Raw()
	}
	if err != nil && refusal(err) && !r.seenIsDocument(ctx, filter) {
		// seen is not a document: start it again. Others come back at
		// their next announce.
		r.Log.Warn("the consumers document of the collection's metadata cannot be updated; replacing it", "error", err)
		fresh := bson.D{{Key: "seen", Value: bson.D{{Key: r.WorkerID, Value: now}}}}
		_, err = meta.ReplaceOne(ctx, filter, fresh, options.Replace().SetUpsert(true))
		return View{Alive: 1}, wrapPeers(err)
	}
	if err != nil {
		return View{Alive: 1}, wrapPeers(err)
	}
	view := CountPeers(raw, alive, r.WorkerID)
	view.Alive = max(view.Alive, 1)
	return view, nil
}

// Look reads what the consumers document says of the consumers alive,
// without announcing this one: one read. ok is false when the document
// does not count this consumer alive (not announced, or forgotten), so
// that it says nothing of this consumer's rank.
func (r *Registry) Look(ctx context.Context, alive Window) (view View, ok bool, err error) {
	raw, err := r.Meta.FindOne(ctx, bson.D{{Key: stored.FID, Value: r.docID()}}).Raw()
	if err != nil {
		return View{Alive: 1}, false, fmt.Errorf("mscheduler: look at the consumers alive: %w", err)
	}
	at, seen := raw.Lookup("seen", r.WorkerID).TimeOK()
	if !seen || !alive.holds(at) {
		return View{Alive: 1}, false, nil
	}
	return CountPeers(raw, alive, r.WorkerID), true, nil
}

// seenIsDocument says the consumers document could be read and its seen
// is a document (or missing): a refusal was not about its shape.
func (r *Registry) seenIsDocument(ctx context.Context, filter bson.D) bool {
	raw, err := r.Meta.FindOne(ctx, filter).Raw()
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
type Window struct{ From, To time.Time }

func (w Window) holds(t time.Time) bool { return !t.Before(w.From) && !t.After(w.To) }

// CountPeers counts the consumers seen within alive, and those of them
// before self in worker id order, and returns the others as gone (seen
// outside it, or with a value that is not a date).
func CountPeers(raw bson.Raw, alive Window, self string) (view View) {
	seen, ok := raw.Lookup("seen").DocumentOK()
	if !ok {
		return view
	}
	elems, _ := seen.Elements()
	for _, e := range elems {
		at, ok := e.Value().TimeOK()
		switch {
		case ok && alive.holds(at):
			view.Alive++
			if e.Key() < self {
				view.Rank++
			}
		case validID(e.Key()): // others cannot be named in an update
			view.Gone = append(view.Gone, e.Key())
		}
	}
	return view
}

// Forget removes consumers gone from the consumers document, so
// that it stays as small as the workers alive; given the window when a
// consumer alive was seen, only if none of them is in it now (one that
// came back stays).
func (r *Registry) Forget(ctx context.Context, gone []string, alive *Window) error {
	if len(gone) == 0 {
		return nil
	}
	gone = gone[:min(len(gone), maxForget)]
	filter := bson.D{{Key: stored.FID, Value: r.docID()}}
	unset := make(bson.D, 0, len(gone))
	back := make(bson.A, 0, len(gone))
	for _, id := range gone {
		unset = append(unset, bson.E{Key: "seen." + id, Value: ""})
		if alive != nil {
			back = append(back, bson.D{{Key: "seen." + id, Value: bson.D{{Key: "$gte", Value: alive.From}, {Key: "$lte", Value: alive.To}}}})
		}
	}
	if alive != nil {
		filter = append(filter, bson.E{Key: "$nor", Value: back})
	}
	_, err := r.Meta.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: unset}})
	if err != nil {
		return fmt.Errorf("mscheduler: forget consumers gone: %w", err)
	}
	return nil
}

// ForgetUnseenSince removes a consumer from the consumers document unless
// it was seen at or after since: a worker whose run's lease lapsed at
// since, unrenewed, is presumed gone, unless it announced since.
func (r *Registry) ForgetUnseenSince(ctx context.Context, id string, since time.Time) error {
	if !validID(id) {
		return nil // a hand-edited holder: no entry of that name can be addressed
	}
	filter := bson.D{{Key: stored.FID, Value: r.docID()}, {Key: "seen." + id, Value: bson.D{{Key: "$lt", Value: since}}}}
	if _, err := r.Meta.UpdateOne(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{{Key: "seen." + id, Value: ""}}}}); err != nil {
		return fmt.Errorf("mscheduler: forget a consumer gone: %w", err)
	}
	return nil
}

// refusal reports an error where the server refused the command on its
// merits, not the network or a timeout.
func refusal(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err)
}
