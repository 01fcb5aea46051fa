package engine

import (
	"sync"
	"time"
	"weak"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/serverclock"
)

// sharedClocks are the server clocks of the consumers that keep the
// default wall and monotonic clocks, one per client and sync interval: the
// consumers of a process measure their server's time once an interval
// between them, not each on its own (idle, 50 consumers sent a hello
// every 1.2 s between them for their clocks alone). The client is held
// weakly: a client let go takes its entry with it at the next lookup.
var sharedClocks struct {
	mu sync.Mutex
	m  map[clockKey]*serverclock.Clock
}

type clockKey struct {
	client   weak.Pointer[mongo.Client]
	interval time.Duration
}

// clockFor is the server clock of a consumer of coll: its own when it
// brings a wall or monotonic clock of its own (a test's fake time), else
// the one its client's consumers share.
func clockFor(coll *mongo.Collection, c *Config) *serverclock.Clock {
	client := coll.Database().Client()
	if c.Clock != nil || c.Monotonic != nil || client == nil {
		return serverclock.New(c.Clock, c.Monotonic, c.ClockSyncInterval)
	}
	key := clockKey{client: weak.Make(client), interval: c.ClockSyncInterval}
	sharedClocks.mu.Lock()
	defer sharedClocks.mu.Unlock()
	if clock, ok := sharedClocks.m[key]; ok {
		return clock
	}
	if sharedClocks.m == nil {
		sharedClocks.m = map[clockKey]*serverclock.Clock{}
	}
	for k := range sharedClocks.m {
		if k.client.Value() == nil {
			delete(sharedClocks.m, k)
		}
	}
	clock := serverclock.New(nil, nil, c.ClockSyncInterval)
	sharedClocks.m[key] = clock
	return clock
}
