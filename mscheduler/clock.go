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

// ClockSyncIntervalDefault is how long a measured server time is trusted
// before it is measured again.
const ClockSyncIntervalDefault = time.Minute

// ClockStepThreshold is how far the local wall clock may drift from the
// monotonic clock between two syncs before the server time is measured
// again at once: a larger difference means the wall clock was stepped (an
// NTP correction, a person) or the machine was suspended, during which the
// monotonic clock stands still.
const ClockStepThreshold = time.Second

// processStart anchors the default monotonic clock.
var processStart = time.Now()

// monotonicSinceStart is the default monotonic clock: time elapsed since the
// process started, measured by the runtime's monotonic clock.
func monotonicSinceStart() time.Duration { return time.Since(processStart) }

// serverClock estimates the server's clock. Leases, run_at and every other
// time the library compares are server times, so that workers whose clocks
// disagree neither run a task twice nor stall.
//
// The estimate is the server time read at the last sync (the localTime of
// the server's hello reply, taken at the midpoint of the round trip) plus
// the time elapsed since on the local monotonic clock. The local wall clock
// never enters it: a wall-clock step between two syncs moves no lease
// decision, and only makes the next sync come at once.
type serverClock struct {
	wall     func() time.Time
	mono     func() time.Duration
	interval time.Duration

	// base is the last sync, replaced whole by sync and read by every
	// goroutine that asks the time.
	base atomic.Pointer[clockBase]

	syncMu sync.Mutex // serializes sync; readers never take it
}

// clockBase is one measurement of the server's clock.
type clockBase struct {
	server time.Time     // the server's time at the midpoint of the round trip
	mono   time.Duration // the local monotonic reading at that midpoint
	wall   time.Time     // the local wall reading then, without its monotonic part
}

func newServerClock(wall func() time.Time, mono func() time.Duration, interval time.Duration) *serverClock {
	if wall == nil {
		wall = time.Now
	}
	if mono == nil {
		mono = monotonicSinceStart
	}
	return &serverClock{wall: wall, mono: mono, interval: interval}
}

// Now is the estimated current server time, truncated to the millisecond
// as BSON dates are, so that a time compared in Go compares the same way in
// a query. Before the first sync it is the local wall clock.
func (c *serverClock) Now() time.Time {
	b := c.base.Load()
	if b == nil {
		return c.wall().Round(0).Truncate(time.Millisecond)
	}
	return b.server.Add(c.mono() - b.mono).Truncate(time.Millisecond)
}

// Offset is the server-minus-local-wall-clock offset at the last sync.
func (c *serverClock) Offset() time.Duration {
	b := c.base.Load()
	if b == nil {
		return 0
	}
	return b.server.Sub(b.wall)
}

// ensure measures the server clock unless the last measurement is younger
// than the interval (on the monotonic clock) and the wall clock has not
// stepped since.
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
	b := c.base.Load()
	if b == nil {
		return false
	}
	elapsed := c.mono() - b.mono
	wallElapsed := c.wall().Round(0).Sub(b.wall)
	return elapsed < c.interval && (wallElapsed-elapsed).Abs() <= ClockStepThreshold
}

func (c *serverClock) sync(ctx context.Context, db *mongo.Database) error {
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	sent := c.mono()
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply)
	received := c.mono()
	wall := c.wall().Round(0)
	if err != nil {
		return fmt.Errorf("mscheduler: read server clock: %w", err)
	}
	if reply.LocalTime.IsZero() {
		return fmt.Errorf("mscheduler: read server clock: hello reply has no localTime")
	}
	half := (received - sent) / 2
	c.base.Store(&clockBase{server: reply.LocalTime, mono: sent + half, wall: wall.Add(-half)})
	return nil
}
