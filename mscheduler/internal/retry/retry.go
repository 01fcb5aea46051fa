// Package retry spreads out and bounds the retries of a worker's commands,
// so that commands that failed or timed out on a struggling server are not
// sent again in a storm: each retry waits a jittered, exponentially growing
// pause, and all retries of a worker draw on one budget that successes
// refill (a tenth of a retry each) and time refills slowly (MinRate a
// second), up to Burst.
package retry

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

const (
	// Ratio is the retries each successful command earns.
	Ratio = 0.1
	// MinRate is the retries a second the budget allows whatever succeeds.
	MinRate = 2.0
	// Burst is the most retries the budget holds.
	Burst = 10.0
)

// Budget is safe for use by several goroutines.
type Budget struct {
	now func() time.Time // monotonic

	mu      sync.Mutex
	tokens  float64
	at      time.Time // when tokens were last refilled by time
	waited  int64     // retries that had to wait for the budget
	granted int64
}

// NewBudget makes a full budget.
func NewBudget(now func() time.Time) *Budget {
	return &Budget{now: now, tokens: Burst, at: now()}
}

// Succeeded earns the budget Ratio of a retry.
func (b *Budget) Succeeded() {
	b.mu.Lock()
	b.tokens = min(Burst, b.tokens+Ratio)
	b.mu.Unlock()
}

// Take takes one retry. If the budget has it, ok; otherwise the retry is
// granted in debt, and wait says how long the caller must wait before
// sending it, so that retries queued together go out one by one at
// MinRate.
func (b *Budget) Take() (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.tokens = min(Burst, b.tokens+now.Sub(b.at).Seconds()*MinRate)
	b.at = now
	b.tokens--
	b.granted++
	if b.tokens >= -1e-9 { // ten tenths make one, in floating point too
		return true, 0
	}
	b.waited++
	return false, time.Duration(-b.tokens / MinRate * float64(time.Second))
}

// Wait takes one retry, waiting as long as the budget says, or until ctx
// is done.
func (b *Budget) Wait(ctx context.Context) error {
	if ok, d := b.Take(); !ok {
		return Sleep(ctx, d)
	}
	return nil
}

// Counts are the retries granted, and how many of them waited for the
// budget.
func (b *Budget) Counts() (granted, waited int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.granted, b.waited
}

// Backoff is the pause before retry number try (1 for the first): base
// doubled each time, at most limit, and then a random part of it, from
// half to all of it, so that workers that failed together do not retry
// together.
func Backoff(base, limit time.Duration, try int) time.Duration {
	d := base
	for i := 1; i < try && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or for ctx.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Bounded returns a copy of parent cancelled with cause after d. Unlike
// context.WithTimeout it has no deadline (Deadline reports none): given a
// deadline, the driver sends the server a maxTimeMS of what is left less
// the least round trip it has seen, and refuses to send the command at
// all when that is not positive, so that on a slow server a command with
// a little time left would never leave. Cancelled, the driver gives up
// waiting for the reply; the server may still apply the command, which
// the fences of every write about a run allow for.
func Bounded(parent context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := time.AfterFunc(max(d, 0), func() { cancel(cause) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// UntilAllDone returns a copy of parent (without its cancellation)
// cancelled once every one of ctxs is done: a write about several runs is
// worth waiting for while any of them still holds its lease. With no ctxs
// it is cancelled at once.
func UntilAllDone(parent context.Context, ctxs []context.Context, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	left := len(ctxs)
	var mu sync.Mutex
	stops := make([]func() bool, 0, len(ctxs))
	for _, c := range ctxs {
		stops = append(stops, context.AfterFunc(c, func() {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				cancel(cause)
			}
		}))
	}
	if len(ctxs) == 0 {
		cancel(cause)
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}
