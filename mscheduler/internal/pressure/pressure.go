// Package pressure turns how long the server takes to answer a worker's
// own commands into a limit on the runs the worker holds, so that a slow
// server gets less work from it rather than timeouts and work redone.
//
// The rule is additive increase, multiplicative decrease against a
// baseline: the baseline is the lowest round trip seen in the last
// [BaselineWindow] (what the server answers in when it is not queueing
// this worker's commands), the current latency a short moving average.
// When the latency is at least [SlowFactor] times the baseline and above a
// floor (below which nothing is slow: [Floor], or an eighth of the
// shortest lease if that is more, since a round trip that small is no
// danger to any lease), the limit halves, at most once per step; when it
// is back under [RecoverFactor] times the baseline, or under the floor,
// the limit grows by one per step, up to the worker's capacity. A step is the
// current latency, and at least [MinStep]: the effect of a change shows
// only after a round trip.
//
// A second rule rests on the lease: a run claimed now is kept only if its
// claim and first ping are answered within its lease. A task whose worker
// timeout the latency leaves no room in is not left pending while the
// server stays that slow: its runs get a longer lease, one the server can
// keep (Stretch), which the claim records on the run. And a claim that
// takes more round trips before its runs' first pings asks Affords, which
// weighs the slowest round trip of the window rather than the average:
// its runs' leases count from its first command.
package pressure

import (
	"slices"
	"sync"
	"time"
)

const (
	// SlowFactor is how many times the baseline the latency must reach
	// for the limit to halve.
	SlowFactor = 2.0
	// RecoverFactor is how close to the baseline the latency must come
	// back for the limit to grow again.
	RecoverFactor = 1.5
	// Floor is the least latency at which the server is taken as slow: a
	// round trip of a few milliseconds doubling is noise, not a queue.
	Floor = 250 * time.Millisecond
	// leaseShare is the part of the shortest lease below which a round
	// trip is not slow either: a run's claim, its first ping and a few
	// retries fit in its lease many times over. A busy server answers in
	// seconds; holding fewer runs does not ease it (a batch renews or ends
	// many runs in one command, a few in one too), while claiming fewer
	// at a time costs it more commands per task.
	leaseShare = 8
	// MinStep is the least time between two changes of the limit.
	MinStep = 250 * time.Millisecond
	// BaselineWindow is how far back the baseline looks.
	BaselineWindow = 30 * time.Second
	// fastWeight is the weight of a new round trip in the average.
	fastWeight = 0.25
	// buckets split the baseline window, each keeping its lowest sample.
	buckets = 6
)

// Change is a change of the limit, for the worker to log.
type Change struct {
	Was, Limit, Max int
	Latency         time.Duration // the average that set it off
	Baseline        time.Duration
	// Unkeepable says the latency leaves no room in the shortest lease for
	// a claim and its first ping: such runs get a longer lease (Stretch).
	Unkeepable bool
}

// Limiter is safe for use by several goroutines: each component of the
// worker observes its own commands, the claim loop reads the limit.
type Limiter struct {
	max      int
	now      func() time.Time // monotonic
	onChange func(Change)

	mu       sync.Mutex // guards what follows
	limit    int
	fast     time.Duration // 0 before the first sample
	mins     [buckets]time.Duration
	maxs     [buckets]time.Duration
	bucketAt time.Time // start of the newest bucket, mins[0]
	changed  time.Time
	lease    time.Duration // the shortest lease to keep, 0 if unknown
	stuck    bool          // the last verdict was Unkeepable
	heldBack int64
}

// New makes a limiter of at most max runs (the worker's capacity), which
// starts at max. now must be monotonic; onChange hears of every change of
// the limit (nil: none is told).
func New(max int, now func() time.Time, onChange func(Change)) *Limiter {
	if onChange == nil {
		onChange = func(Change) {}
	}
	return &Limiter{max: max, limit: max, now: now, onChange: onChange, bucketAt: now()}
}

// Observe takes in the round trip of one command.
func (l *Limiter) Observe(d time.Duration) {
	if d < 0 {
		return
	}
	l.mu.Lock()
	now := l.now()
	l.roll(now)
	if l.mins[0] == 0 || d < l.mins[0] {
		l.mins[0] = d
	}
	l.maxs[0] = max(l.maxs[0], d)
	if l.fast == 0 {
		l.fast = d
	} else {
		l.fast += time.Duration(fastWeight * float64(d-l.fast))
	}
	change, ok := l.adjust(now)
	l.mu.Unlock()
	if ok {
		l.onChange(change)
	}
}

// roll starts new buckets as time passes, forgetting the oldest.
func (l *Limiter) roll(now time.Time) {
	width := BaselineWindow / buckets
	for now.Sub(l.bucketAt) >= width {
		copy(l.mins[1:], l.mins[:buckets-1])
		copy(l.maxs[1:], l.maxs[:buckets-1])
		l.mins[0], l.maxs[0] = 0, 0
		l.bucketAt = l.bucketAt.Add(width)
		if now.Sub(l.bucketAt) > BaselineWindow { // idle for long: start afresh
			l.bucketAt = now
		}
	}
}

func (l *Limiter) baseline() time.Duration {
	var b time.Duration
	for _, m := range l.mins {
		if m > 0 && (b == 0 || m < b) {
			b = m
		}
	}
	return b
}

// adjust applies the rules once per step; it reports a change.
func (l *Limiter) adjust(now time.Time) (Change, bool) {
	base := l.baseline()
	unkeepable := l.lease > 0 && 2*l.fast+Floor >= l.lease
	if unkeepable != l.stuck {
		was := l.allowed()
		l.stuck = unkeepable
		return Change{Was: was, Limit: l.allowed(), Max: l.max, Latency: l.fast, Baseline: base, Unkeepable: unkeepable}, true
	}
	if !l.changed.IsZero() && now.Sub(l.changed) < max(l.fast, MinStep) {
		return Change{}, false
	}
	if l.lease == 0 {
		// No lease to keep yet: a worker that has claimed nothing has
		// nothing to protect, and halving at its first round trips (its
		// start, on a server busy with the others' work) only splits its
		// first claims.
		return Change{}, false
	}
	floor := max(Floor, l.lease/leaseShare)
	slow := l.fast >= floor && float64(l.fast) >= SlowFactor*float64(base)
	recovered := l.fast < floor || float64(l.fast) < RecoverFactor*float64(base)
	next := l.limit
	switch {
	case slow:
		next = max(1, l.limit/2)
	case recovered && l.limit < l.max:
		next = l.limit + 1
	}
	if next == l.limit {
		return Change{}, false
	}
	was := l.allowed()
	l.limit, l.changed = next, now
	return Change{Was: was, Limit: l.allowed(), Max: l.max, Latency: l.fast, Baseline: base}, true
}

func (l *Limiter) allowed() int { return l.limit }

// Stretch says which leases a run claimed now cannot be kept within, and
// the lease such a run gets instead: a lease of at most need leaves no
// room for the claim and its first ping at the slowest round trip of the
// window (or the latency, if more), with Floor to spare; to is twice
// need, rounded up to stretchStep. Both are 0 before the first round trip.
func (l *Limiter) Stretch() (need, to time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fast == 0 {
		return 0, 0
	}
	l.roll(l.now())
	peak := max(l.fast, slices.Max(l.maxs[:]))
	need = 2*peak + Floor
	to = 2 * need
	return need, (to + stretchStep - 1) / stretchStep * stretchStep
}

// stretchStep rounds a stretched lease, so that runs claimed together get
// the same one.
const stretchStep = 100 * time.Millisecond

// Limit is how many runs the worker may hold now.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowed()
}

// Throttled says the limit is below the worker's capacity.
func (l *Limiter) Throttled() bool { return l.Limit() < l.max }

// Latency is the current average round trip (0 before the first).
func (l *Limiter) Latency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fast
}

// KeepWithin sets the shortest lease a claimed run must be kept within
// (the shortest worker timeout the worker has seen).
func (l *Limiter) KeepWithin(lease time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lease > 0 && (l.lease == 0 || lease < l.lease) {
		l.lease = lease
	}
}

// ShortestLease is the shortest lease KeepWithin was given (0: none).
func (l *Limiter) ShortestLease() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// HoldBack counts n free slots left unclaimed because of the limit.
func (l *Limiter) HoldBack(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.heldBack += int64(n)
	l.mu.Unlock()
}

// HeldBack is how many free slots were left unclaimed because of the
// limit, in all.
func (l *Limiter) HeldBack() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldBack
}

// Affords says a run whose lease is lease, claimed now, can be claimed
// and first pinged in rounds round trips within it, each as slow as the
// slowest of the last BaselineWindow, with Floor to spare. With no round
// trip seen yet, it does.
func (l *Limiter) Affords(rounds int, lease time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roll(l.now())
	peak := slices.Max(l.maxs[:])
	return lease <= 0 || time.Duration(rounds)*peak+Floor < lease
}

// Baseline is the lowest round trip of the last BaselineWindow.
func (l *Limiter) Baseline() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.baseline()
}
