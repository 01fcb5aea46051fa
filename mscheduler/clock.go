package mscheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ClockSyncIntervalDefault is how long a measured server clock offset is
// trusted before it is measured again.
const ClockSyncIntervalDefault = time.Minute

// serverClock estimates the server's clock from the local one. Leases,
// run_at and every other time the library compares are server times, so that
// workers whose clocks disagree neither run a task twice nor stall.
//
// The offset is measured from the localTime field of the server's hello
// reply, taken at the midpoint of the round trip.
type serverClock struct {
	local    func() time.Time
	interval time.Duration

	// offset (server minus local, in ns) and syncedAt (local UnixNano) are
	// written by sync and read by every goroutine that asks the time.
	offset   atomic.Int64
	syncedAt atomic.Int64

	syncMu sync.Mutex // serializes sync; readers never take it
}

func newServerClock(local func() time.Time, interval time.Duration) *serverClock {
	if local == nil {
		local = time.Now
	}
	return &serverClock{local: local, interval: interval}
}

// Now is the estimated current server time, truncated to the millisecond
// as BSON dates are, so that a time compared in Go compares the same way in
// a query.
func (c *serverClock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load())).Truncate(time.Millisecond)
}

// Offset is the last measured server-minus-local offset.
func (c *serverClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// ensure measures the offset unless a measurement younger than the interval
// exists.
func (c *serverClock) ensure(ctx context.Context, db *mongo.Database) error {
	if c.fresh() {
		return nil
	}
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if c.fresh() {
		return nil
	}
	return c.sync(ctx, db)
}

func (c *serverClock) fresh() bool {
	at := c.syncedAt.Load()
	return at != 0 && c.local().Sub(time.Unix(0, at)) < c.interval
}

func (c *serverClock) sync(ctx context.Context, db *mongo.Database) error {
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	sent := c.local()
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply)
	received := c.local()
	if err != nil {
		return fmt.Errorf("mscheduler: read server clock: %w", err)
	}
	if reply.LocalTime.IsZero() {
		return fmt.Errorf("mscheduler: read server clock: hello reply has no localTime")
	}
	midpoint := sent.Add(received.Sub(sent) / 2)
	c.offset.Store(int64(reply.LocalTime.Sub(midpoint)))
	c.syncedAt.Store(received.UnixNano())
	return nil
}
