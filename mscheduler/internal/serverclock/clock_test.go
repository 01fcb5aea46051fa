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
