package mscheduler

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// localWakes lets a producer wake, at once, the consumers of its collection
// that share its mongo.Client, whatever the server: a change stream wakes
// the consumers of other processes too, but without one (a standalone
// server, the development server) they only find the change at their next
// poll, and a process that both publishes and consumes should not wait for
// its own poll.
var localWakes = &wakeRegistry{subs: map[namespace]map[chan<- struct{}]struct{}{}}

// namespace identifies a collection as reached through one client.
type namespace struct {
	client   *mongo.Client
	db, coll string
}

func namespaceOf(coll *mongo.Collection) namespace {
	return namespace{client: coll.Database().Client(), db: coll.Database().Name(), coll: coll.Name()}
}

type wakeRegistry struct {
	mu   sync.Mutex
	subs map[namespace]map[chan<- struct{}]struct{}
}

// subscribe makes notify(ns) send to ch, which must be buffered: sends
// never block, and a full channel already holds a wake.
func (r *wakeRegistry) subscribe(ns namespace, ch chan<- struct{}) (unsubscribe func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[ns] == nil {
		r.subs[ns] = map[chan<- struct{}]struct{}{}
	}
	r.subs[ns][ch] = struct{}{}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs[ns], ch)
		if len(r.subs[ns]) == 0 {
			delete(r.subs, ns)
		}
	}
}

// notify wakes every consumer subscribed to ns.
func (r *wakeRegistry) notify(ns namespace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.subs[ns] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
