package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// readyTimeout bounds /readyz's look at the server.
const readyTimeout = 2 * time.Second

// heartbeat announces the worker in the registry every HeartbeatInterval
// until ctx is done (see mscheduler.Heartbeat), and now and then forgets
// workers not seen for an hour on servers without TTL indexes.
func (w *Worker) heartbeat(ctx context.Context, consumers []*consumer) {
	host, _ := os.Hostname()
	info := mscheduler.WorkerInfo{
		ID: w.cfg.WorkerID, Host: host, PID: os.Getpid(), Version: mscheduler.Version,
		Collections: w.collections(consumers), Groups: w.cfg.Groups, StartedAt: time.Now().UTC(),
		HeartbeatMS: w.cfg.HeartbeatInterval.Milliseconds(),
	}
	for _, c := range consumers {
		info.Capacity += c.capacity
	}
	if err := mscheduler.EnsureWorkerIndexes(ctx, w.db); err != nil && ctx.Err() == nil {
		w.log.Warn("could not create the worker registry's index", "error", err)
	}
	tick := time.NewTicker(w.cfg.HeartbeatInterval)
	defer tick.Stop()
	for beat := 0; ; beat++ {
		info.Running = w.running()
		if err := mscheduler.Heartbeat(ctx, w.db, info); err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat failed", "error", err)
		}
		if beat%100 == 99 {
			if _, err := mscheduler.ForgetWorkers(ctx, w.db); err != nil && ctx.Err() == nil {
				w.log.Warn("could not forget old workers", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// deregister removes the worker from the registry, on a clean stop.
func (w *Worker) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := mscheduler.Deregister(ctx, w.db, w.cfg.WorkerID); err != nil {
		w.log.Warn("could not remove the worker from the registry", "error", err)
	}
}

// serveHTTP starts the listener of HTTPAddr: /metrics, /healthz and
// /readyz. It returns the server, or nil when HTTPAddr is empty.
func (w *Worker) serveHTTP() (*http.Server, error) {
	if w.cfg.HTTPAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", w.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("worker: listen on %s (HTTPAddr): %w", w.cfg.HTTPAddr, err)
	}
	w.httpAddr.Store(ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := w.client.Ping(ctx, nil); err != nil {
			// The probe's answer is public to whoever reaches the port: the
			// driver's error (hosts, topology) goes to the log.
			w.log.Warn("readiness: the server did not answer a ping", "error", err)
			http.Error(rw, "server not answering (the worker's log has the error)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	served := "/metrics, /healthz and /readyz"
	if w.cfg.Dashboard != nil {
		dcfg := *w.cfg.Dashboard
		if name := dashboard.ListenName(w.cfg.HTTPAddr); name != "" {
			dcfg.AllowedHosts = append(slices.Clone(dcfg.AllowedHosts), name)
		}
		d, err := dashboard.New(w.db, &dcfg)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("worker: Dashboard: %w", err)
		}
		mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
		served += " and /dashboard/"
		if d.ReadOnly() {
			// Whether it can act is part of what the listener exposes.
			served += " (read-only)"
		}
	}
	srv := dashboard.NewServer(mux) // every time bounded, for /metrics too
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("HTTP listener stopped", "error", err)
		}
	}()
	w.log.Info("serving "+served, "addr", ln.Addr().String())
	return srv, nil
}

// HTTPAddr is the address the metrics and health listener is bound to,
// once Run has started it; empty otherwise.
func (w *Worker) HTTPAddr() string {
	addr, _ := w.httpAddr.Load().(string)
	return addr
}

// running is the number of runs the worker's consumers hold.
func (w *Worker) running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.consumers {
		n += c.running()
	}
	return n
}

// leads reports whether a consumer of collection holds its maintenance
// lease.
func (w *Worker) leads(consumers []*consumer, collection string) bool {
	for _, c := range consumers {
		if c.collection == collection && c.leader() {
			return true
		}
	}
	return false
}
