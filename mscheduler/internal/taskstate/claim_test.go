package taskstate

import (
	"math"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// TestRunLeaseTakesTheLongerOfTimeoutAndLeaseMS: a holder's lease_ms
// lengthens its run's lease, never shortens it, and counts for nothing
// when not positive (edited by hand); before the first ping, the claim's
// lease_until bounds the stretched lease as it bounds the task's.
func TestRunLeaseTakesTheLongerOfTimeoutAndLeaseMS(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	claimed := stored.Holder{Run: "r", Started: started, LeaseUntil: started.Add(ClaimLease)}
	for _, tc := range []struct {
		leaseMS     int64
		timeout     time.Duration
		lease       time.Duration // RunLease
		prePingLeft time.Duration // EffectiveLease - started, before the first ping
	}{
		{0, 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{5000, 2 * time.Second, 5 * time.Second, 5 * time.Second},
		{1000, 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{-5000, 2 * time.Second, 2 * time.Second, 2 * time.Second},
		{1 << 62, 2 * time.Second, time.Duration(math.MaxInt64), ClaimLease},
	} {
		h := claimed
		h.LeaseMS = tc.leaseMS
		if got := RunLease(h, tc.timeout); got != tc.lease {
			t.Errorf("lease_ms %d, timeout %s: RunLease %s, want %s", tc.leaseMS, tc.timeout, got, tc.lease)
		}
		if got := EffectiveLease(h, tc.timeout).Sub(started); got != tc.prePingLeft {
			t.Errorf("lease_ms %d, timeout %s: lapses %s after the claim, want %s", tc.leaseMS, tc.timeout, got, tc.prePingLeft)
		}
	}
	// Once pinged, lease_until alone says.
	pinged := claimed
	pinged.LeaseUntil, pinged.LeaseMS = started.Add(7*time.Second), 5000
	if got := EffectiveLease(pinged, 2*time.Second); !got.Equal(pinged.LeaseUntil) {
		t.Errorf("a pinged run lapses at %s, want its lease_until %s", got, pinged.LeaseUntil)
	}
}
