package engine

import (
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/pressure"
)

// TestStretchFailsOnlyPastTheClaimsLease: a consumer takes nothing new
// only when the shortest lease it has seen is not kept even stretched,
// the stretch reaching the claim's own lease; one that has seen no lease
// (it has read no task yet) always claims, to learn the tasks' timeouts.
// Driven by a limiter fed 8 s round trips, then 20 ms ones.
func TestStretchFailsOnlyPastTheClaimsLease(t *testing.T) {
	for _, tc := range []struct {
		need, to, shortest time.Duration
		fails              bool
	}{
		{16 * time.Second, 33 * time.Second, 0, false},
		{16 * time.Second, 33 * time.Second, 5 * time.Second, true},
		{16 * time.Second, 33 * time.Second, time.Minute, false},     // kept as it is
		{14 * time.Second, 29 * time.Second, 5 * time.Second, false}, // kept stretched
		{15 * time.Second, maxStretch, 5 * time.Second, true},
	} {
		if got := stretchFails(tc.need, tc.to, tc.shortest); got != tc.fails {
			t.Errorf("need %s, to %s, shortest %s: fails %v, want %v", tc.need, tc.to, tc.shortest, got, tc.fails)
		}
	}

	now := time.Unix(0, 0)
	l := pressure.New(4, func() time.Time { return now }, nil)
	for range 10 {
		l.Observe(8 * time.Second)
		now = now.Add(time.Second)
	}
	need, to := l.Stretch()
	if stretchFails(need, to, l.ShortestLease()) {
		t.Error("at 8 s round trips with no lease seen: claims stop, and no task's timeout is ever read")
	}
	l.KeepWithin(5 * time.Second)
	if !stretchFails(need, to, l.ShortestLease()) {
		t.Errorf("at 8 s round trips a 5 s lease is kept stretched to %s, past the claim's own lease", to)
	}
	for range 100 {
		l.Observe(20 * time.Millisecond)
		now = now.Add(time.Second)
	}
	if need, to := l.Stretch(); stretchFails(need, to, l.ShortestLease()) || need >= 5*time.Second {
		t.Errorf("after the server came back: need %s, to %s", need, to)
	}
}
