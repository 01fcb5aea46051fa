// Package watch follows a task collection's change stream for a consumer:
// it wakes the consumer's claim loop on every change that can make a slot
// claimable, and cancels the consumer's runs of a task cancelled. Polls
// stay the fallback: a stream that fails is resumed, or opened anew with a
// wake so that a query finds what it missed.
package watch

import (
	"context"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Stream is one consumer's part of its database's change stream, shared
// by the consumers of the process (see hub.go). Its exported fields are
// set before Open and never change; Wake and Cancel must not block (they
// are called under the hub's lock).
type Stream struct {
	Coll   *mongo.Collection
	Wake   func()           // something may have become claimable
	Cancel func(key string) // the task was cancelled: stop this consumer's runs of it
	Error  func(ctx context.Context, err error)
	// Idle says the consumer has a free slot, so that a wake may start a
	// claim. Nil means always.
	Idle func() bool

	// sh is the shared stream joined: written by Open and Close (under
	// the hub's lock), read by the claim loop through Delivering.
	sh  atomic.Pointer[shared]
	key dbKey // under the hub's lock
}

// ReopenDelay is the pause before reopening a failed change stream.
const ReopenDelay = time.Second

// Open joins the database's change stream, opening it if this is the
// process's first consumer of the database.
func (s *Stream) Open(ctx context.Context) error { return s.join(ctx) }

// Close leaves the database's change stream; the last consumer to leave
// closes it. Idempotent.
func (s *Stream) Close() { s.leave() }

// Delivering says the stream is open and delivering events.
func (s *Stream) Delivering() bool {
	sh := s.sh.Load()
	return sh != nil && sh.open.Load()
}

// Pipeline passes only the changes that can make a slot claimable: a new
// task, a freed slot, a moved run_at, a changed concurrency or status, a
// pause lifted, and an occurrence of a plan begun by its plan gate (its
// other slots are claimable from then on). Pings and claims that leave no slot free do not
// wake the workers.
func Pipeline() mongo.Pipeline {
	updated := func(field string) bson.D {
		return bson.D{{Key: "updateDescription.updatedFields." + field, Value: taskstate.Op("$exists", true)}}
	}
	return mongo.Pipeline{{{Key: "$match", Value: taskstate.Op("$or", bson.A{
		taskstate.Op("operationType", taskstate.Op("$in", bson.A{"insert", "replace"})),
		bson.D{{Key: "updateDescription.updatedFields." + stored.FFree, Value: taskstate.Op("$gt", 0)}},
		updated(stored.FRunAt),
		updated(stored.FConcurrency),
		// A status that makes a slot claimable (pending), cancels runs
		// (cancelled), or tells of a claim (running: a quiet consumer's
		// sweeps come back for the run, see the engine's quiet.go). A run
		// end that leaves its task final frees nothing: no event.
		bson.D{{Key: "updateDescription.updatedFields." + stored.FStatus, Value: taskstate.Op("$in",
			bson.A{stored.StatusPending, stored.StatusRunning, stored.StatusCancelled})}},
		updatedTrue(stored.PStarted),
		// A pause lifted: removed (Resume), or set false by hand.
		bson.D{{Key: "updateDescription.removedFields", Value: stored.FPaused}},
		bson.D{{Key: "updateDescription.updatedFields." + stored.FPaused, Value: false}},
	})}}}
}

// updatedTrue matches an update that set the nested field path to true.
// updatedFields names it by its dotted path, as one field that a query
// path cannot reach (it would look for a sub-document): only $getField
// (MongoDB 5.0) reads such a name.
func updatedTrue(path string) bson.D {
	field := bson.D{{Key: "$getField", Value: bson.D{
		{Key: "field", Value: taskstate.Op("$literal", path)},
		{Key: "input", Value: "$updateDescription.updatedFields"},
	}}}
	return taskstate.Op("$expr", taskstate.Op("$eq", bson.A{field, true}))
}

// OnChange wakes the claim loop, and cancels the runs of a task whose
// status became cancelled.
func (s *Stream) OnChange(event bson.Raw) {
	status, _ := event.Lookup("updateDescription", "updatedFields", stored.FStatus).StringValueOK()
	if stored.Status(status) == stored.StatusCancelled {
		if key, ok := event.Lookup("documentKey", stored.FID).StringValueOK(); ok {
			s.Cancel(key)
		}
	}
	s.Wake()
}
