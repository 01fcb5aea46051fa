// Package localwake lets the producers and consumers of one collection
// that share a mongo.Client (one process) tell each other at once,
// whatever the server: a producer wakes the consumers after a publish and
// cancels their runs of a cancelled task; a consumer tells the producers'
// waiters that a run of a task ended, and so does either of them whose
// write ended a task with no run to end (a cancel, a plan finished at its
// claim, a task set invalid). A change stream tells other processes too,
// but without one (a standalone server) they only
// find out at their next poll or ping, and a process should not wait for
// its own poll.
package localwake

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Consumer is how the registry reaches a consumer: Wake is buffered (a
// full channel already holds a wake), and Cancel must return at once.
type Consumer struct {
	Wake   chan<- struct{}
	Cancel func(key string)
}

// Waiter hears of tasks that may have ended: Ended is buffered, and a full
// one drops the news (the waiter reads the task itself).
type Waiter struct {
	Ended chan<- string
}

// namespace identifies a collection as reached through one client.
type namespace struct {
	client   *mongo.Client
	db, coll string
}

func namespaceOf(coll *mongo.Collection) namespace {
	return namespace{client: coll.Database().Client(), db: coll.Database().Name(), coll: coll.Name()}
}

// registry is the process's: every producer and consumer reaches the
// others through it.
var registry = struct {
	mu        sync.Mutex
	consumers map[namespace]map[*Consumer]struct{}
	waiters   map[namespace]map[*Waiter]struct{}
}{
	consumers: map[namespace]map[*Consumer]struct{}{},
	waiters:   map[namespace]map[*Waiter]struct{}{},
}

// AddConsumer makes c reachable by the producers of coll until remove.
func AddConsumer(coll *mongo.Collection, c *Consumer) (remove func()) {
	return add(registry.consumers, namespaceOf(coll), c)
}

// AddWaiter makes w hear of the tasks of coll that may have ended, until
// remove.
func AddWaiter(coll *mongo.Collection, w *Waiter) (remove func()) {
	return add(registry.waiters, namespaceOf(coll), w)
}

func add[T comparable](m map[namespace]map[T]struct{}, ns namespace, v T) (remove func()) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if m[ns] == nil {
		m[ns] = map[T]struct{}{}
	}
	m[ns][v] = struct{}{}
	return func() {
		registry.mu.Lock()
		defer registry.mu.Unlock()
		delete(m[ns], v)
		if len(m[ns]) == 0 {
			delete(m, ns)
		}
	}
}

// Wake wakes every consumer of coll.
func Wake(coll *mongo.Collection) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for c := range registry.consumers[namespaceOf(coll)] {
		select {
		case c.Wake <- struct{}{}:
		default:
		}
	}
}

// Cancel cancels the runs of the task key that the consumers of coll hold.
func Cancel(coll *mongo.Collection, key string) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for c := range registry.consumers[namespaceOf(coll)] {
		c.Cancel(key)
	}
}

// Ended tells the waiters of coll that task key may have reached a final
// status (or invalid): a run of it ended, or a write ended it.
func Ended(coll *mongo.Collection, key string) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for w := range registry.waiters[namespaceOf(coll)] {
		select {
		case w.Ended <- key:
		default:
		}
	}
}
