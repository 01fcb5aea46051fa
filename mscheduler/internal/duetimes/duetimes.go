// Package duetimes keeps the server times at which a consumer's claim
// loop should look again for claimable tasks: a future run_at, or a lease
// that may lapse. A time kept twice is harmless (one look more), and the
// number kept is bounded: the earliest are the ones that matter.
package duetimes

import (
	"container/heap"
	"slices"
	"time"
)

// Max is how many times a Heap keeps at most.
const Max = 64

// Heap is a min-heap of due times. Its zero value is empty and ready; it
// belongs to one goroutine (the claim loop).
type Heap struct{ times byTime }

type byTime []time.Time

func (h byTime) Len() int           { return len(h) }
func (h byTime) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h byTime) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byTime) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *byTime) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Len is how many times are kept.
func (h *Heap) Len() int { return len(h.times) }

// Add keeps t, once: an idle worker learns the same next due time at
// every poll. Full, the heap keeps the earliest Max.
func (h *Heap) Add(t time.Time) {
	if slices.ContainsFunc(h.times, t.Equal) {
		return
	}
	if len(h.times) >= Max {
		latest := 0
		for i, d := range h.times {
			if d.After(h.times[latest]) {
				latest = i
			}
		}
		if !t.Before(h.times[latest]) {
			return
		}
		heap.Remove(&h.times, latest)
	}
	heap.Push(&h.times, t)
}

// Peek returns the earliest time kept, if any.
func (h *Heap) Peek() (time.Time, bool) {
	if len(h.times) == 0 {
		return time.Time{}, false
	}
	return h.times[0], true
}

// PopDue forgets the times at or before now.
func (h *Heap) PopDue(now time.Time) {
	for len(h.times) > 0 && !h.times[0].After(now) {
		heap.Pop(&h.times)
	}
}
