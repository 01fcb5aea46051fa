package gateway

import (
	"context"
	"net"
	"slices"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// HeartbeatIntervalDefault is the default Config.HeartbeatInterval.
const HeartbeatIntervalDefault = 10 * time.Second

// executorSeen is what the gateway knows of an executor, for the worker
// registry: the dashboard and the command's workers list show executors
// beside worker processes.
type executorSeen struct {
	groups      []string
	host        string
	collections []string
	started     time.Time // wall clock, for the registry
	lastCall    time.Time // wall clock of its last take or renew
	capacity    int       // the largest max of its takes: how many runs it runs at once
}

// seen notes a take (of up to takeMax runs) or a renew (takeMax 0) of an
// executor, for its next heartbeat.
func (g *Gateway) seen(ex Executor, coll, remoteAddr string, takeMax int) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	s := g.executors[ex.ID]
	if s == nil {
		s = &executorSeen{started: now}
		g.executors[ex.ID] = s
	}
	s.groups, s.host, s.lastCall, s.capacity = ex.Groups, host, now, max(s.capacity, takeMax)
	if !slices.Contains(s.collections, coll) {
		s.collections = append(s.collections, coll)
	}
	if !g.beating {
		g.beating = true
		go g.heartbeats()
	}
}

// heartbeats announces the executors that called within the last
// StaleAfterBeats intervals, every HeartbeatInterval, until Stop. An
// executor that stops calling goes stale in the registry as a dead worker
// process does.
func (g *Gateway) heartbeats() {
	defer close(g.beatsDone)
	tick := time.NewTicker(g.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		g.beat()
		g.reapIdlePools()
		select {
		case <-tick.C:
		case <-g.stopCh:
			return
		}
	}
}

func (g *Gateway) beat() {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.HeartbeatInterval)
	defer cancel()
	for _, w := range g.liveExecutors() {
		if err := mscheduler.Heartbeat(ctx, g.db, w); err != nil {
			g.cfg.Logger.Warn("gateway: executor heartbeat failed", "executor", w.ID, "error", err)
			return
		}
	}
}

// liveExecutors are the registry documents of the executors that called
// lately, with the runs each holds.
func (g *Gateway) liveExecutors() []mscheduler.WorkerInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	held := map[string][]string{} // run ids by executor
	for _, r := range g.runs {
		if id := r.executorID(); id != "" {
			held[id] = append(held[id], r.runID)
		}
	}
	cutoff := time.Now().Add(-mscheduler.StaleAfterBeats * g.cfg.HeartbeatInterval)
	var out []mscheduler.WorkerInfo
	for id, s := range g.executors {
		if s.lastCall.Before(cutoff) && len(held[id]) == 0 {
			continue
		}
		out = append(out, mscheduler.WorkerInfo{
			ID: id, Host: s.host, Version: "gateway executor via " + g.cfg.WorkerID, Collections: slices.Clone(s.collections),
			Groups: slices.Clone(s.groups), Capacity: s.capacity, Running: len(held[id]), RunIDs: slices.Sorted(slices.Values(held[id])),
			StartedAt: s.started, HeartbeatMS: g.cfg.HeartbeatInterval.Milliseconds(),
		})
	}
	return out
}

// reapIdlePools stops the pools of executors that have gone: no call for
// StaleAfterBeats heartbeats (gone, as the registry judges them), no run
// held or on its way, no take waiting. Each executor has a consumer of its
// own in each collection it takes from; without this, executors that came
// and went would fill MaxPools and keep their consumers polling.
func (g *Gateway) reapIdlePools() {
	cutoff := time.Now().Add(-mscheduler.StaleAfterBeats * g.cfg.HeartbeatInterval)
	var idle []*pool
	g.mu.Lock()
	held := map[*pool]bool{}
	for _, r := range g.runs {
		held[r.pool] = true
	}
	for key, e := range g.pools {
		select {
		case <-e.done:
		default:
			continue // starting
		}
		p := e.p
		if p == nil || held[p] {
			continue
		}
		// An executor not seen yet is taking right now: its take started
		// the pool and notes it next.
		if s := g.executors[p.executor]; s == nil || !s.lastCall.Before(cutoff) {
			continue
		}
		if p.close() {
			delete(g.pools, key)
			idle = append(idle, p)
		}
	}
	g.mu.Unlock()
	for _, p := range idle {
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.HeartbeatInterval)
		if err := p.consumer.Stop(ctx); err != nil {
			g.cfg.Logger.Warn("gateway: stopping the consumer of an executor gone", "executor", p.executor, "collection", p.coll, "error", err)
		}
		cancel()
	}
}
