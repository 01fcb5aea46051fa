package serverclock

import (
	"testing"
	"time"
)

type fake struct {
	wall time.Time
	mono time.Duration
}

func (f *fake) clock(interval time.Duration) *Clock {
	return New(func() time.Time { return f.wall }, func() time.Duration { return f.mono }, interval)
}

func (f *fake) step(d time.Duration) { f.wall, f.mono = f.wall.Add(d), f.mono+d }

func TestNowIsTheMeasureCarriedByTheMonotonicClock(t *testing.T) {
	f := &fake{wall: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	c := f.clock(time.Minute)
	if got := c.Now(); !got.Equal(f.wall) {
		t.Fatalf("before a measure, Now = %s, want the wall clock %s", got, f.wall)
	}
	server := f.wall.Add(30 * time.Second) // the server's clock is 30 s ahead
	c.base.Store(&clockBase{server: server, mono: f.mono, wall: f.wall})
	f.step(1500 * time.Millisecond)
	if got, want := c.Now(), server.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now = %s, want %s", got, want)
	}
	if !c.fresh() {
		t.Fatal("a measure 1.5 s old, with the clocks in step, is not fresh")
	}
	f.wall = f.wall.Add(-5 * time.Second) // the wall clock is stepped back
	if got, want := c.Now(), server.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("a wall-clock step moved Now to %s, want %s", got, want)
	}
	if c.fresh() {
		t.Fatal("after a wall-clock step of 5 s, the measure is still fresh: it would not be taken again at once")
	}
}

func TestAMeasureOlderThanTheIntervalIsNotFresh(t *testing.T) {
	f := &fake{wall: time.Now()}
	c := f.clock(time.Minute)
	c.base.Store(&clockBase{server: f.wall, mono: f.mono, wall: f.wall})
	f.step(59 * time.Second)
	if !c.fresh() {
		t.Fatal("a measure 59 s old is not fresh, with an interval of a minute")
	}
	f.step(time.Second)
	if c.fresh() {
		t.Fatal("a measure a minute old is fresh, with an interval of a minute")
	}
}

func TestShareReadsTheSameTime(t *testing.T) {
	f := &fake{wall: time.Now()}
	like, c := f.clock(time.Minute), f.clock(time.Minute)
	like.base.Store(&clockBase{server: f.wall.Add(time.Hour), mono: f.mono, wall: f.wall})
	c.Share(like)
	f.step(10 * time.Minute)
	if !c.Now().Equal(like.Now()) || !c.fresh() {
		t.Fatalf("shared clock reads %s (fresh %v), the other %s", c.Now(), c.fresh(), like.Now())
	}
}

// TestUncertaintyIsHalfTheRoundTrip: the server read its clock somewhere
// within the sync's round trip; Now takes the midpoint, and the server's
// clock may be ahead of it by up to half the round trip (a command read
// at once, its answer held on its way back).
func TestUncertaintyIsHalfTheRoundTrip(t *testing.T) {
	f := &fake{wall: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)}
	c := f.clock(time.Minute)
	if got := c.Uncertainty(); got != 0 {
		t.Fatalf("uncertainty before a sync: %s, want 0", got)
	}
	// The server, whose clock agrees with ours, read its time as the
	// command was sent; the answer took 400 ms to come back.
	sent, serverRead := f.mono, f.wall
	f.step(400 * time.Millisecond)
	c.record(serverRead, sent, f.mono, f.wall)
	if got := c.Uncertainty(); got != 200*time.Millisecond {
		t.Fatalf("uncertainty after a sync of 400 ms: %s, want 200ms", got)
	}
	if behind := f.wall.Sub(c.Now()); behind != 200*time.Millisecond || behind > c.Uncertainty() {
		t.Fatalf("Now is %s behind the server, uncertainty %s: want 200ms, within it", behind, c.Uncertainty())
	}
}

// TestASlowSyncKeepsTheSurerMeasure: a sync answered slowly (a busy
// server) is less sure than the last one carried forward; the last one
// is kept, its uncertainty grown by the drift the clocks may have, so that
// one slow answer does not make every lease look shorter for a minute. A
// sync that disagrees with it (the server's clock was stepped) is taken,
// and so is one after the machine was suspended.
func TestASlowSyncKeepsTheSurerMeasure(t *testing.T) {
	f := &fake{wall: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)}
	c := f.clock(time.Minute)
	sync := func(serverAhead, roundTrip time.Duration) {
		sent := f.mono
		f.step(roundTrip)
		c.record(f.wall.Add(serverAhead-roundTrip/2), sent, f.mono, f.wall)
	}
	sync(0, 2*time.Millisecond)
	f.step(time.Minute)
	sync(0, 800*time.Millisecond)
	if got, want := c.Uncertainty(), time.Millisecond+30*time.Millisecond; got < want || got > want+time.Millisecond {
		t.Fatalf("after a slow sync a minute on, uncertainty %s: want the fast one's carried, about %s", got, want)
	}
	f.step(time.Minute)
	sync(2*time.Second, 800*time.Millisecond) // the server's clock was stepped 2 s ahead
	if got := c.Uncertainty(); got != 400*time.Millisecond {
		t.Fatalf("after a sync that disagrees, uncertainty %s, want the new one's 400ms", got)
	}
	if ahead := c.Now().Sub(f.wall); ahead != 2*time.Second {
		t.Fatalf("Now is %s ahead of the local clock, want the stepped server's 2s", ahead)
	}
	sync(2*time.Second, 4*time.Millisecond)
	// Suspended for 300 ms, as the monotonic clock stood still: carried
	// forward, the last measure would be 300 ms behind, within what the
	// slow sync's uncertainty allows.
	f.wall = f.wall.Add(300 * time.Millisecond)
	sync(2*time.Second, 800*time.Millisecond)
	if got := c.Uncertainty(); got != 400*time.Millisecond {
		t.Fatalf("after a suspend, uncertainty %s, want the new sync's 400ms", got)
	}
}
