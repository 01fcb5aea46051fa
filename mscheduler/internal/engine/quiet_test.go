package engine

import (
	"slices"
	"testing"
	"time"
)

// TestQuietMaintenancePassesStretch: a quiet collection's maintenance
// passes come at doubling spans of the interval up to quietMaintainMax;
// a sign of work brings the next turn's pass at once, and the span back to
// one interval.
func TestQuietMaintenancePassesStretch(t *testing.T) {
	const every = time.Minute
	c := &Engine{cfg: &Config{MaintenanceInterval: every}}
	st := &upkeepState{}
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	var passes []int // in intervals from t0
	for turn := range 40 {
		if c.passDue(st, t0.Add(time.Duration(turn)*every)) {
			passes = append(passes, turn)
		}
	}
	want := []int{0, 2, 6, 14, 22, 30, 38}
	if !slices.Equal(passes, want) {
		t.Fatalf("quiet passes at turns %v, want %v", passes, want)
	}
	c.activity.Add(1)
	if !c.passDue(st, t0.Add(39*every)) {
		t.Fatal("no pass at the turn after a sign of work")
	}
	if !c.passDue(st, t0.Add(41*every)) || c.passDue(st, t0.Add(42*every)) {
		t.Fatal("after a sign of work, the stretch did not start again from one interval")
	}
}

// TestQuietUpkeepKeepsTheConsumerAliveAndTheLeaseHeld: a quiet consumer's
// announces and tries at the maintenance lease come twice as far apart,
// never so far that the others count it gone or its lease lapses, and at
// every interval again after a sign of work.
func TestQuietUpkeepKeepsTheConsumerAliveAndTheLeaseHeld(t *testing.T) {
	const most = 1.2 // the jitter's
	if float64(quietUpkeepStretch)*most >= peerLapse {
		t.Fatalf("a quiet consumer announces up to %.1f intervals apart; it is gone after %d", quietUpkeepStretch*most, peerLapse)
	}
	const every = time.Minute
	c := &Engine{cfg: &Config{MaintenanceInterval: every}}
	var seen uint64
	c.activity.Add(1)
	if d := c.quietUpkeep(&seen, every); d != every {
		t.Fatalf("after a sign of work: %v, want %v", d, every)
	}
	if d := c.quietUpkeep(&seen, every); d != quietUpkeepStretch*every {
		t.Fatalf("quiet: %v, want %v", d, quietUpkeepStretch*every)
	}
	c.activity.Add(1)
	if d := c.quietUpkeep(&seen, every); d != every {
		t.Fatalf("after another sign of work: %v, want %v", d, every)
	}
}
