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
