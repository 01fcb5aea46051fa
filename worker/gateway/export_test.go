package gateway

import "context"

// Demand is what the pool of an executor (of no groups) in a collection
// asks its consumer to hold: runs with the executor, runs its waiting
// takes want, and runs waiting out a retry delay; 0 when no pool was
// started.
func Demand(g *Gateway, coll, executor string) int {
	g.mu.Lock()
	e := g.pools[poolKey(coll, Executor{ID: executor})]
	g.mu.Unlock()
	if e == nil || e.p == nil {
		return 0
	}
	return e.p.demand()
}

// PoolServed says a take on ctx would be served by the started pool of an
// executor (of no groups) in a collection.
func PoolServed(ctx context.Context, g *Gateway, coll, executor string) bool {
	p, err := g.poolOf(ctx, coll, Executor{ID: executor})
	return p != nil && err == nil
}

// Waiting is how many takes wait at once (what MaxWaiting bounds).
func Waiting(g *Gateway) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Pools is how many consumers the gateway runs.
func Pools(g *Gateway) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pools)
}

// ReapIdlePools stops the consumers of executors gone, as each heartbeat does.
func ReapIdlePools(g *Gateway) { g.reapIdlePools() }
