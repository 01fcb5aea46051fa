package gateway

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
