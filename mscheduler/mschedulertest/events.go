package mschedulertest

import (
	"sync"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// WaitTimeout bounds every wait for events; the development server is slow,
// so it is generous, and a passing test never waits for it.
const WaitTimeout = 3 * time.Minute

// Events records consumer events (pass its Record as ConsumerConfig.OnEvent)
// and lets a test wait for a condition on them without sleeping.
type Events struct {
	mu     sync.Mutex
	all    []mscheduler.Event
	signal chan struct{} // buffered 1: an event arrived
}

// NewEvents returns an empty recorder.
func NewEvents() *Events { return &Events{signal: make(chan struct{}, 1)} }

// Record stores an event; it never blocks.
func (e *Events) Record(ev mscheduler.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.signal <- struct{}{}:
	default:
	}
}

// Snapshot returns the events recorded so far.
func (e *Events) Snapshot() []mscheduler.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]mscheduler.Event(nil), e.all...)
}

// Count is the number of events of one kind recorded so far.
func (e *Events) Count(kind mscheduler.EventKind) int {
	return countKind(e.Snapshot(), kind)
}

func countKind(evs []mscheduler.Event, kind mscheduler.EventKind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// WaitFor waits until cond holds on the events, checking again on each new
// event; it fails the test after WaitTimeout.
func (e *Events) WaitFor(t testing.TB, what string, cond func([]mscheduler.Event) bool) {
	t.Helper()
	e.WaitForWithin(t, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own timeout.
func (e *Events) WaitForWithin(t testing.TB, timeout time.Duration, what string, cond func([]mscheduler.Event) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !cond(e.Snapshot()) {
		select {
		case <-e.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; events: %v", what, Summarize(e.Snapshot()))
		}
	}
}

// WaitCount waits until at least n events of a kind were recorded.
func (e *Events) WaitCount(t testing.TB, kind mscheduler.EventKind, n int) {
	t.Helper()
	e.WaitCountWithin(t, WaitTimeout, kind, n)
}

// WaitCountWithin is WaitCount with its own timeout.
func (e *Events) WaitCountWithin(t testing.TB, timeout time.Duration, kind mscheduler.EventKind, n int) {
	t.Helper()
	e.WaitForWithin(t, timeout, string(kind)+" events", func(evs []mscheduler.Event) bool {
		return countKind(evs, kind) >= n
	})
}

// Summarize counts events by kind, for failure messages.
func Summarize(evs []mscheduler.Event) map[mscheduler.EventKind]int {
	out := map[mscheduler.EventKind]int{}
	for _, ev := range evs {
		out[ev.Kind]++
	}
	return out
}
