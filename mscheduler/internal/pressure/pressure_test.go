package pressure

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func observeFor(l *Limiter, c *fakeClock, d, every, span time.Duration) {
	for end := c.t.Add(span); c.t.Before(end); c.add(every) {
		l.Observe(d)
	}
}

// TestHalvesWhenSlowAndRecoversByOne: latency at ten times its baseline
// halves the limit step by step down to 1; back at the baseline, it grows
// by one a step up to the capacity.
func TestHalvesWhenSlowAndRecoversByOne(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	var changes []Change
	l := New(16, c.now, func(ch Change) { changes = append(changes, ch) })
	l.KeepWithin(2 * time.Second)
	observeFor(l, c, 50*time.Millisecond, 10*time.Millisecond, 2*time.Second)
	if l.Limit() != 16 || len(changes) != 0 {
		t.Fatalf("at the baseline: limit %d, %d changes", l.Limit(), len(changes))
	}
	observeFor(l, c, 500*time.Millisecond, 10*time.Millisecond, 5*time.Second)
	if l.Limit() != 1 {
		t.Fatalf("slow for 5 s: limit %d, want 1 (changes %+v)", l.Limit(), changes)
	}
	for i := 1; i < len(changes); i++ {
		if changes[i].Limit != changes[i-1].Limit/2 {
			t.Fatalf("the limit went %d -> %d, want halving", changes[i-1].Limit, changes[i].Limit)
		}
	}
	changes = nil
	observeFor(l, c, 50*time.Millisecond, 10*time.Millisecond, 10*time.Second)
	if l.Limit() != 16 {
		t.Fatalf("recovered for 10 s: limit %d, want 16", l.Limit())
	}
	for i, ch := range changes {
		if ch.Limit != i+2 {
			t.Fatalf("change %d to %d, want one step up each (%+v)", i, ch.Limit, changes)
		}
	}
}

// TestFastServersAreNeverSlow: round trips below Floor never throttle,
// however they vary.
func TestFastServersAreNeverSlow(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := New(8, c.now, nil)
	observeFor(l, c, time.Millisecond, 10*time.Millisecond, time.Second)
	observeFor(l, c, 80*time.Millisecond, 10*time.Millisecond, 5*time.Second)
	if l.Limit() != 8 {
		t.Fatalf("limit %d, want 8", l.Limit())
	}
}

// TestUnkeepableLeaseIsStretched: when a claim and its first ping would
// not fit in the shortest lease, the worker is told so and still takes
// work: Stretch names the leases too short to keep and the longer one
// their runs get, which fits the claim and first ping twice at the slowest
// round trip; once the latency falls, no lease needs stretching.
func TestUnkeepableLeaseIsStretched(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	var changes []Change
	l := New(8, c.now, func(ch Change) { changes = append(changes, ch) })
	if need, to := l.Stretch(); need != 0 || to != 0 {
		t.Fatalf("before any round trip: Stretch = %s, %s; want none", need, to)
	}
	l.KeepWithin(5 * time.Second)
	observeFor(l, c, 3*time.Second, 100*time.Millisecond, 5*time.Second)
	l.Observe(3500 * time.Millisecond) // the slowest of the window
	if len(changes) == 0 || !changes[0].Unkeepable {
		t.Fatalf("3 s round trips, 5 s leases: changes %+v; want one saying so", changes)
	}
	if l.Limit() == 0 {
		t.Fatal("the limit fell to 0: a task whose lease the server cannot keep would stay pending")
	}
	need, to := l.Stretch()
	if need < 5*time.Second {
		t.Errorf("need %s: a 5 s lease is not keepable at 3 s round trips", need)
	}
	if want := 2 * (2*3500*time.Millisecond + Floor); to < want || to%stretchStep != 0 {
		t.Errorf("stretched to %s, want at least %s, a multiple of %s", to, want, stretchStep)
	}
	observeFor(l, c, 20*time.Millisecond, 100*time.Millisecond, 2*BaselineWindow)
	if need, _ := l.Stretch(); need >= 5*time.Second {
		t.Fatalf("need %s after the latency fell to 20 ms", need)
	}
	if last := changes[len(changes)-1]; last.Unkeepable {
		t.Fatalf("the last change %+v still says unkeepable", last)
	}
}

// TestBaselineForgetsOldSamples: a low round trip seen long ago no longer
// counts as the baseline once BaselineWindow has passed, so that a server
// that is slow for good (a farther region) is not throttled for ever.
func TestBaselineForgetsOldSamples(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := New(8, c.now, nil)
	l.KeepWithin(2 * time.Second)
	observeFor(l, c, 10*time.Millisecond, 10*time.Millisecond, time.Second)
	observeFor(l, c, 400*time.Millisecond, 50*time.Millisecond, BaselineWindow+10*time.Second)
	observeFor(l, c, 400*time.Millisecond, 50*time.Millisecond, 30*time.Second)
	if l.Limit() != 8 {
		t.Fatalf("limit %d after a steady 400 ms for a minute, want 8", l.Limit())
	}
}

// TestNoLeaseNoHalving: a worker that knows no lease yet is never slow,
// however its round trips grow; once a lease is known, the floor is an
// eighth of it.
func TestNoLeaseNoHalving(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := New(16, c.now, nil)
	observeFor(l, c, 10*time.Millisecond, 10*time.Millisecond, time.Second)
	observeFor(l, c, 2*time.Second, 100*time.Millisecond, 5*time.Second)
	if l.Limit() != 16 {
		t.Fatalf("no lease known, 2 s round trips: limit %d, want 16", l.Limit())
	}
	l.KeepWithin(30 * time.Second) // floor 3.75 s
	observeFor(l, c, 2*time.Second, 100*time.Millisecond, 5*time.Second)
	if l.Limit() != 16 {
		t.Fatalf("30 s leases, 2 s round trips: limit %d, want 16", l.Limit())
	}
	observeFor(l, c, 5*time.Second, 100*time.Millisecond, 10*time.Second)
	if l.Limit() >= 16 {
		t.Fatalf("30 s leases, 5 s round trips: limit %d, want halved", l.Limit())
	}
}

// TestAffordsByTheSlowestRoundTrip: whether a claim and first ping of so
// many round trips fit in a lease rests on the slowest round trip of the
// window, not the average, and forgets it once the window has passed.
func TestAffordsByTheSlowestRoundTrip(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := New(8, c.now, nil)
	if !l.Affords(3, 2500*time.Millisecond) {
		t.Fatal("with no round trip seen, a lease of 2.5 s is not afforded")
	}
	l.Observe(800 * time.Millisecond)
	observeFor(l, c, 300*time.Millisecond, 100*time.Millisecond, 2*time.Second)
	if l.Latency() >= 500*time.Millisecond {
		t.Fatalf("average %v: the test wants it well below the peak", l.Latency())
	}
	if l.Affords(3, 2500*time.Millisecond) {
		t.Error("3 round trips of the 800 ms peak and the floor afforded in 2.5 s")
	}
	if !l.Affords(2, 2500*time.Millisecond) {
		t.Error("2 round trips of the 800 ms peak and the floor not afforded in 2.5 s")
	}
	observeFor(l, c, 300*time.Millisecond, 100*time.Millisecond, BaselineWindow+time.Second)
	if !l.Affords(3, 2500*time.Millisecond) {
		t.Error("the 800 ms peak still counts a window later")
	}
}
