package mscheduler

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// local lets producers and consumers of one collection that share a
// mongo.Client (one process) tell each other at once, whatever the server:
// a producer wakes the consumers after a publish and cancels their runs of
// a cancelled task; a consumer tells the producers' waiters that a task
// ended. A change stream tells other processes too, but without one (a
// standalone server, the development server) they only find out at their
// next poll or ping, and a process should not wait for its own poll.
var local = &localRegistry{
	consumers: map[namespace]map[*localConsumer]struct{}{},
	waiters:   map[namespace]map[*localWaiter]struct{}{},
}

// namespace identifies a collection as reached through one client.
type namespace struct {
	client   *mongo.Client
	db, coll string
}

func namespaceOf(coll *mongo.Collection) namespace {
	return namespace{client: coll.Database().Client(), db: coll.Database().Name(), coll: coll.Name()}
}

// localConsumer is how the registry reaches a consumer: wake is buffered
// (a full channel already holds a wake), and cancel returns at once.
type localConsumer struct {
	wake   chan<- struct{}
	cancel func(key string)
}

// localWaiter hears of tasks that ended: ended is buffered, and a full one
// drops the news (the waiter reads the task itself).
type localWaiter struct {
	ended chan<- string
}

type localRegistry struct {
	mu        sync.Mutex
	consumers map[namespace]map[*localConsumer]struct{}
	waiters   map[namespace]map[*localWaiter]struct{}
}

func add[T comparable](r *localRegistry, m map[namespace]map[T]struct{}, ns namespace, v T) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m[ns] == nil {
		m[ns] = map[T]struct{}{}
	}
	m[ns][v] = struct{}{}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(m[ns], v)
		if len(m[ns]) == 0 {
			delete(m, ns)
		}
	}
}

func (r *localRegistry) addConsumer(ns namespace, c *localConsumer) func() {
	return add(r, r.consumers, ns, c)
}

func (r *localRegistry) addWaiter(ns namespace, w *localWaiter) func() {
	return add(r, r.waiters, ns, w)
}

// wake wakes every consumer of ns.
func (r *localRegistry) wake(ns namespace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.consumers[ns] {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// cancel cancels the runs of the task key that the consumers of ns hold.
func (r *localRegistry) cancel(ns namespace, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.consumers[ns] {
		c.cancel(key)
	}
}

// ended tells the waiters of ns that a run of task key ended (the task may
// have reached a final status).
func (r *localRegistry) ended(ns namespace, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiters[ns] {
		select {
		case w.ended <- key:
		default:
		}
	}
}
