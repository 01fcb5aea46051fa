package gateway

import "context"

// Demand is what the pool of a collection and groups asks its consumer to
// hold: runs with executors, runs waiting takes want, and runs waiting out
// a retry delay; 0 when no pool was started.
func Demand(g *Gateway, coll string, groups []string) int {
	g.mu.Lock()
	e := g.pools[poolKey(coll, groups)]
	g.mu.Unlock()
	if e == nil || e.p == nil {
		return 0
	}
	return e.p.demand()
}

// PoolServed says a take on ctx would be served by the started pool of a
// collection (no groups).
func PoolServed(ctx context.Context, g *Gateway, coll string) bool {
	p, err := g.poolOf(ctx, coll, nil)
	return p != nil && err == nil
}

// Waiting is how many takes wait at once (what MaxWaiting bounds).
func Waiting(g *Gateway) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}
