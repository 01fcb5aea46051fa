package mscheduler

import (
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
)

// ClockSyncIntervalDefault is how long a measured server time is trusted
// before it is measured again.
const ClockSyncIntervalDefault = time.Minute

// ClockStepThreshold is how far the local wall clock may drift from the
// monotonic clock between two syncs before the server time is measured
// again at once: a larger difference means the wall clock was stepped (an
// NTP correction, a person) or the machine was suspended, during which the
// monotonic clock stands still.
const ClockStepThreshold = serverclock.StepThreshold

// serverClock estimates the server's clock (see internal/serverclock).
type serverClock = serverclock.Clock

func newServerClock(wall func() time.Time, mono func() time.Duration, interval time.Duration) *serverClock {
	return serverclock.New(wall, mono, interval)
}
