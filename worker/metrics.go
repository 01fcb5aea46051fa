package worker

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// taskCountEvery is how often the maintenance lease holder of a collection
// counts its tasks by status for the tasks gauge.
const taskCountEvery = 30 * time.Second

// metrics are the worker's Prometheus metrics, in a registry of its own.
// Labels are few: the collection, and the outcome of a run's end.
type metrics struct {
	registry *prometheus.Registry

	started   *prometheus.CounterVec
	ended     *prometheus.CounterVec
	expired   *prometheus.CounterVec
	lost      *prometheus.CounterVec
	renewals  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	invalid   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	runTime   *prometheus.HistogramVec
	claimTime *prometheus.HistogramVec
	endTime   *prometheus.HistogramVec
	tasks     *prometheus.GaugeVec
	// commands is the round trip of every command of the worker's
	// client, by command name, as the driver saw it.
	commands *prometheus.HistogramVec
}

// latencyBuckets suit commands to a database: 1 ms to 10 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 11)

func newMetrics(w *Worker) *metrics {
	m := &metrics{registry: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mscheduler", Name: name, Help: help}, labels)
		m.registry.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "mscheduler", Name: name, Help: help, Buckets: buckets}, labels)
		m.registry.MustRegister(h)
		return h
	}
	m.started = counter("runs_started_total", "Runs this worker claimed and started.", "collection")
	m.ended = counter("runs_ended_total", "Runs of this worker that ended, by outcome (succeeded, failed, released, revoked, cancelled).", "collection", "outcome")
	m.expired = counter("runs_expired_total", "Runs of dead workers that this worker's sweeps recorded as expired.", "collection")
	m.lost = counter("leases_lost_total", "Runs this worker lost: taken over, or not renewed before their lease lapsed.", "collection")
	m.renewals = counter("lease_renewals_total", "Pings that renewed a lease.", "collection")
	m.retries = counter("local_retries_total", "Handler attempts that failed and were retried locally.", "collection")
	m.invalid = counter("tasks_set_invalid_total", "Tasks this worker found unusable as stored and set to status invalid.", "collection")
	m.errors = counter("errors_total", "Background operations that failed (a claim, a ping, a write); the worker went on.", "collection")
	m.runTime = histogram("run_duration_seconds", "Time from a run's claim to its end, by outcome.",
		prometheus.ExponentialBuckets(0.01, 3, 12), "collection", "outcome")
	m.claimTime = histogram("claim_duration_seconds", "Round trip of the command that claims a run.", latencyBuckets, "collection")
	m.endTime = histogram("run_end_duration_seconds", "Time to write a run's end, retries included.", latencyBuckets, "collection")
	m.commands = histogram("command_duration_seconds", "Round trip of each command of the worker's client, by command name (failed ones too).", latencyBuckets, "command")
	m.registry.MustRegister(pressureCollector{w})
	m.tasks = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "mscheduler", Name: "tasks",
		Help: "Tasks by status, counted every 30 s by the one worker holding the collection's maintenance lease."}, []string{"collection", "status"})
	m.registry.MustRegister(m.tasks)
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "mscheduler", Name: "runs_in_progress",
		Help: "Runs this worker holds now.", ConstLabels: prometheus.Labels{"worker_id": w.cfg.WorkerID}}, func() float64 { return float64(w.running()) }))
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "mscheduler", Name: "worker_info",
		Help: "1, labelled with the worker's id and the library version.", ConstLabels: prometheus.Labels{"worker_id": w.cfg.WorkerID, "version": mscheduler.Version}},
		func() float64 { return 1 }))
	return m
}

// commandMonitor times each command of the worker's client.
func (m *metrics) commandMonitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			m.commands.WithLabelValues(e.CommandName).Observe(e.Duration.Seconds())
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			m.commands.WithLabelValues(e.CommandName).Observe(e.Duration.Seconds())
		},
	}
}

// pressureCollector reports what each consumer knows of the server's
// load (see mscheduler.Pressure), read when scraped.
type pressureCollector struct{ w *Worker }

var (
	runsLimitDesc = prometheus.NewDesc("mscheduler_runs_limit",
		"Runs a consumer may hold now: its capacity, less when the server slowed down, 0 while a new run's lease could not be kept even stretched to 30 s.", []string{"collection"}, nil)
	heldBackDesc = prometheus.NewDesc("mscheduler_claims_held_back_total",
		"Free slots a consumer left unclaimed because the server was slow.", []string{"collection"}, nil)
	serverLatencyDesc = prometheus.NewDesc("mscheduler_server_latency_seconds",
		"Recent average round trip of a consumer's claims, pings and announces.", []string{"collection"}, nil)
	commandRetriesDesc = prometheus.NewDesc("mscheduler_command_retries_total",
		"Commands a consumer sent again after a failure (run ends, pings).", []string{"collection"}, nil)
)

func (pressureCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsLimitDesc, heldBackDesc, serverLatencyDesc, commandRetriesDesc} {
		ch <- d
	}
}

// Collect sums over the consumers of each collection (a worker may run
// several of one collection).
func (p pressureCollector) Collect(ch chan<- prometheus.Metric) {
	p.w.mu.Lock()
	consumers := slices.Clone(p.w.consumers)
	p.w.mu.Unlock()
	type sums struct {
		limit, heldBack, retries float64
		latency                  time.Duration
	}
	by := map[string]*sums{}
	for _, c := range consumers {
		s := by[c.collection]
		if s == nil {
			s = &sums{}
			by[c.collection] = s
		}
		pr := c.pressure()
		s.limit += float64(pr.Limit)
		s.heldBack += float64(pr.HeldBack)
		s.retries += float64(pr.Retries)
		s.latency = max(s.latency, pr.Latency)
	}
	for name, s := range by {
		ch <- prometheus.MustNewConstMetric(runsLimitDesc, prometheus.GaugeValue, s.limit, name)
		ch <- prometheus.MustNewConstMetric(heldBackDesc, prometheus.CounterValue, s.heldBack, name)
		ch <- prometheus.MustNewConstMetric(serverLatencyDesc, prometheus.GaugeValue, s.latency.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(commandRetriesDesc, prometheus.CounterValue, s.retries, name)
	}
}

// observe counts one consumer event.
func (m *metrics) observe(collection string, e mscheduler.Event) {
	switch e.Kind {
	case mscheduler.EventClaimed:
		m.started.WithLabelValues(collection).Inc()
		m.claimTime.WithLabelValues(collection).Observe(e.Latency.Seconds())
	case mscheduler.EventSucceeded, mscheduler.EventFailed, mscheduler.EventReleased, mscheduler.EventRevoked, mscheduler.EventCancelled:
		m.ended.WithLabelValues(collection, string(e.Kind)).Inc()
		m.runTime.WithLabelValues(collection, string(e.Kind)).Observe(e.Duration.Seconds())
		m.endTime.WithLabelValues(collection).Observe(e.Latency.Seconds())
	case mscheduler.EventExpired:
		m.expired.WithLabelValues(collection).Inc()
	case mscheduler.EventLeaseLost:
		m.lost.WithLabelValues(collection).Inc()
	case mscheduler.EventRenewed:
		m.renewals.WithLabelValues(collection).Inc()
	case mscheduler.EventRetried:
		m.retries.WithLabelValues(collection).Inc()
	case mscheduler.EventInvalid:
		m.invalid.WithLabelValues(collection).Inc()
	case mscheduler.EventError:
		m.errors.WithLabelValues(collection).Inc()
	}
}

// countTasks keeps the tasks gauge of each collection whose maintenance
// lease one of this worker's consumers holds, until ctx is done; the other
// workers report no tasks gauge for it, so that a sum over workers counts
// each task once.
func (m *metrics) countTasks(ctx context.Context, w *Worker, consumers []*consumer) {
	tick := time.NewTicker(taskCountEvery)
	defer tick.Stop()
	for {
		for _, name := range w.collections(consumers) {
			if !w.leads(consumers, name) {
				m.tasks.DeletePartialMatch(prometheus.Labels{"collection": name})
				continue
			}
			counts, err := mscheduler.CountByStatus(ctx, w.db.Collection(name))
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("could not count tasks for the metrics", "collection", name, "error", err)
				}
				continue
			}
			for status, n := range counts {
				m.tasks.WithLabelValues(name, string(status)).Set(float64(n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
