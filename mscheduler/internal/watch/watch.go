// Package watch follows a task collection's change stream for a consumer:
// it wakes the consumer's claim loop on every change that can make a slot
// claimable, and cancels the consumer's runs of a task cancelled. Polls
// stay the fallback: a stream that fails is resumed, or opened anew with a
// wake so that a query finds what it missed.
package watch

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Stream is one consumer's change stream. Its fields are set before Open
// and never change; Wake and Cancel must not block.
type Stream struct {
	Coll   *mongo.Collection
	Wake   func()           // something may have become claimable
	Cancel func(key string) // the task was cancelled: stop this consumer's runs of it
	Error  func(ctx context.Context, err error)

	// open says a stream is delivering events: written by Open and Loop,
	// read by the claim loop (which polls less often meanwhile).
	open atomic.Bool
}

// ReopenDelay is the pause before reopening a failed change stream.
const ReopenDelay = time.Second

// Open opens the change stream; the caller hands it to Loop, or closes it
// and calls Closed.
func (s *Stream) Open(ctx context.Context) (*mongo.ChangeStream, error) {
	cs, err := s.Coll.Watch(ctx, Pipeline())
	if err != nil {
		return nil, err
	}
	s.open.Store(true)
	return cs, nil
}

// Delivering says a stream is open and delivering events.
func (s *Stream) Delivering() bool { return s.open.Load() }

// Closed says the stream Open returned was closed without a Loop.
func (s *Stream) Closed() { s.open.Store(false) }

// Pipeline passes only the changes that can make a slot claimable: a new
// task, a freed slot, a moved run_at, a changed concurrency or status,
// and an occurrence of a plan begun by its plan gate (its other slots are
// claimable from then on). Pings and claims that leave no slot free do not
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
		updated(stored.FStatus),
		updatedTrue(stored.PStarted),
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

// Loop delivers the events of cs until ctx is done. After an error it
// resumes from the last token; if the server cannot resume (the token fell
// out of its oplog), it opens a new stream and wakes the claim loop so
// that the changes it missed are found by a query.
func (s *Stream) Loop(ctx context.Context, cs *mongo.ChangeStream) {
	defer s.open.Store(false)
	for {
		for cs.Next(ctx) {
			s.OnChange(cs.Current)
		}
		token := cs.ResumeToken()
		err := cs.Err()
		_ = cs.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		s.open.Store(false)
		s.Error(ctx, fmt.Errorf("mscheduler: change stream: %w", err))
		s.Wake()
		if cs = s.reopen(ctx, token); cs == nil {
			return
		}
		s.open.Store(true)
		s.Wake()
	}
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

// reopen opens the stream again, from token if the server still has it,
// until it opens or ctx is done (then nil).
func (s *Stream) reopen(ctx context.Context, token bson.Raw) *mongo.ChangeStream {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ReopenDelay):
		}
		opts := options.ChangeStream()
		if token != nil {
			opts.SetResumeAfter(token)
		}
		cs, err := s.Coll.Watch(ctx, Pipeline(), opts)
		if err == nil {
			return cs
		}
		s.Error(ctx, fmt.Errorf("mscheduler: reopen change stream: %w", err))
		token = nil // a token the server rejected is not tried again
	}
}
