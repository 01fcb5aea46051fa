// Package serverclock estimates the server's clock from the local
// monotonic clock. Leases, run_at and every other time mscheduler compares
// are server times, so that workers whose clocks disagree neither run a
// task twice nor stall.
package serverclock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// StepThreshold is how far the local wall clock may drift from the
// monotonic clock between two syncs before the server time is measured
// again at once: a larger difference means the wall clock was stepped (an
// NTP correction, a person) or the machine was suspended, during which the
// monotonic clock stands still.
const StepThreshold = time.Second

// processStart anchors the default monotonic clock.
var processStart = time.Now()

// monotonicSinceStart is the default monotonic clock: time elapsed since the
// process started, measured by the runtime's monotonic clock.
func monotonicSinceStart() time.Duration { return time.Since(processStart) }

// Clock estimates the server's clock. Leases, run_at and every other
// time the library compares are server times, so that workers whose clocks
// disagree neither run a task twice nor stall.
//
// The estimate is the server time read at the last sync (the localTime of
// the server's hello reply, taken at the midpoint of the round trip) plus
// the time elapsed since on the local monotonic clock. The local wall clock
// never enters it: a wall-clock step between two syncs moves no lease
// decision, and only makes the next sync come at once.
type Clock struct {
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
	// half is half the sync's round trip: the server read its clock at
	// some point of it, not surely at the midpoint.
	half time.Duration
}

func New(wall func() time.Time, mono func() time.Duration, interval time.Duration) *Clock {
	if wall == nil {
		wall = time.Now
	}
	if mono == nil {
		mono = monotonicSinceStart
	}
	return &Clock{wall: wall, mono: mono, interval: interval}
}

// Now is the estimated current server time, truncated to the millisecond
// as BSON dates are, so that a time compared in Go compares the same way in
// a query. Before the first sync it is the local wall clock.
func (c *Clock) Now() time.Time {
	b := c.base.Load()
	if b == nil {
		return c.wall().Round(0).Truncate(time.Millisecond)
	}
	return b.server.Add(c.mono() - b.mono).Truncate(time.Millisecond)
}

// Uncertainty bounds how far the server's clock may be from Now: the
// server read its time somewhere within the sync's round trip, which Now
// takes at its midpoint; a command delayed more on one way than on the
// other (a busy network, a queue in front of the server) leaves Now off
// by up to half the round trip. Zero before the first sync.
func (c *Clock) Uncertainty() time.Duration {
	if b := c.base.Load(); b != nil {
		return b.half
	}
	return 0
}

// Offset is the server-minus-local-wall-clock offset at the last sync.
func (c *Clock) Offset() time.Duration {
	b := c.base.Load()
	if b == nil {
		return 0
	}
	return b.server.Sub(b.wall)
}

// Ensure measures the server clock unless the last measurement is younger
// than the interval (on the monotonic clock) and the wall clock has not
// stepped since.
func (c *Clock) Ensure(ctx context.Context, db *mongo.Database) error {
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

func (c *Clock) fresh() bool {
	b := c.base.Load()
	if b == nil {
		return false
	}
	elapsed := c.mono() - b.mono
	wallElapsed := c.wall().Round(0).Sub(b.wall)
	return elapsed < c.interval && (wallElapsed-elapsed).Abs() <= StepThreshold
}

func (c *Clock) sync(ctx context.Context, db *mongo.Database) error {
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
	c.record(reply.LocalTime, sent, received, wall)
	return nil
}

// record takes in the server's time read by a command sent and answered at
// the monotonic readings sent and received, the wall clock reading wall
// on its answer. A measure taken by a slow round trip is less sure than
// the last one carried forward (its uncertainty grown by what the clocks
// may drift apart since), and agrees with it within both: the last one is
// kept, so that one slow answer does not widen every lease decision until
// the next sync.
func (c *Clock) record(server time.Time, sent, received time.Duration, wall time.Time) {
	half := (received - sent) / 2
	measured := &clockBase{server: server, mono: sent + half, wall: wall.Add(-half), half: half}
	if carried := c.carried(measured); carried != nil && carried.half < half && agree(carried, measured) {
		measured = carried
	}
	c.base.Store(measured)
}

// maxDrift bounds how fast the local monotonic clock and the server's may
// run apart: 500 parts per million, well beyond the crystal of a machine
// (tens of ppm) or a virtual machine's clock.
const maxDrift = 500e-6

// carryTolerance is how far the wall and monotonic clocks may disagree
// between two syncs, beyond their drift, for the last measure to be
// carried forward: the resolution of a reading, with room to spare.
const carryTolerance = 10 * time.Millisecond

// carried is the last measure moved to the new one's readings, with its
// uncertainty grown by the drift; nil when there is none, or when the
// machine may have been suspended since (the wall clock moved otherwise
// than the monotonic one, which stands still then; a wall clock stepped
// looks the same, and the new measure is taken then too).
func (c *Clock) carried(now *clockBase) *clockBase {
	last := c.base.Load()
	if last == nil {
		return nil
	}
	elapsed := now.mono - last.mono
	drift := time.Duration(maxDrift * float64(elapsed.Abs()))
	if (now.wall.Sub(last.wall) - elapsed).Abs() > drift+carryTolerance {
		return nil
	}
	return &clockBase{server: last.server.Add(elapsed), mono: now.mono, wall: now.wall, half: last.half + drift}
}

// agree says two measures taken at the same readings could both be right:
// their server times differ by no more than their uncertainties allow (a
// server whose clock was stepped does not agree with the last measure).
func agree(a, b *clockBase) bool { return a.server.Sub(b.server).Abs() <= a.half+b.half }

// Mono is the monotonic clock's reading.
func (c *Clock) Mono() time.Duration { return c.mono() }

// Share makes c read the server's time from like's clocks and last
// measurement, never measuring again: for tests that drive several
// workers on one fake time.
func (c *Clock) Share(like *Clock) {
	c.wall, c.mono, c.interval = like.wall, like.mono, time.Duration(1<<63-1)
	c.base.Store(like.base.Load())
}
