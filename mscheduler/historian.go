package mscheduler

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Batching of history writes: records are written together when this many
// are waiting, or when the oldest has waited historyFlushEvery; the removal
// of their marks waits up to historyCarryWait for a batch of run ends.
const (
	historyBatch      = 100
	historyFlushEvery = time.Second
	historyCarryWait  = 5 * time.Second
	historyQueue      = 1024
)

// historian writes the history records of the runs this consumer ended,
// in batches, then pulls their ids from the tasks' unlogged lists. Its
// loop owns the batch. A record it cannot write (the queue full, the
// server unreachable) is not lost: its id stays in unlogged, and the
// maintenance pass writes it later from the task's runs.
//
// While the consumer is busy, the pulls ride with the next batch of run ends
// instead of costing a command of their own; what no batch took within
// historyCarryWait is sent alone.
type historian struct {
	tasks, history *mongo.Collection
	retention      Retention
	writeTimeout   time.Duration
	log            *slog.Logger
	onError        func(error)
	ends           *endBatcher // nil when run ends are written alone
	busy           func() bool // a batch of run ends is on its way

	queue chan historyDoc // written by run ends, read by the loop
}

func newHistorian(tasks *mongo.Collection, retention Retention, writeTimeout time.Duration, log *slog.Logger, onError func(error),
	ends *endBatcher, busy func() bool) *historian {
	return &historian{tasks: tasks, history: historyCollection(tasks), retention: retention, writeTimeout: writeTimeout,
		log: log, onError: onError, ends: ends, busy: busy, queue: make(chan historyDoc, historyQueue)}
}

// add queues a run's record; it never blocks.
func (h *historian) add(key string, r runRecord) {
	select {
	case h.queue <- newHistoryDoc(key, r, h.retention):
	default: // the maintenance pass writes it from the task's runs
	}
}

// loop writes batches until ctx is done, then writes what is queued.
func (h *historian) loop(ctx context.Context) {
	var batch []historyDoc
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	carried := time.NewTimer(time.Hour) // when pulls left with the run ends are sent alone
	carried.Stop()
	defer carried.Stop()
	for {
		select {
		case d := <-h.queue:
			if len(batch) == 0 {
				timer.Reset(historyFlushEvery)
			}
			batch = append(batch, d)
			if len(batch) >= historyBatch {
				batch = h.flush(batch, carried)
			}
		case <-timer.C:
			batch = h.flush(batch, carried)
		case <-carried.C:
			h.sendCarried()
		case <-ctx.Done():
			for {
				select {
				case d := <-h.queue:
					batch = append(batch, d)
				default:
					h.flush(batch, nil)
					h.sendCarried()
					return
				}
			}
		}
	}
}

// flush writes a batch and returns it emptied for reuse. The pulls go with
// the run ends when the consumer is busy and carried (the timer that sends
// them alone if no batch took them) is given; alone otherwise.
func (h *historian) flush(batch []historyDoc, carried *time.Timer) []historyDoc {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.writeTimeout)
	defer cancel()
	if err := insertHistory(ctx, h.history, batch); err != nil {
		h.onError(err)
		return batch[:0]
	}
	logged := map[string][]string{}
	for _, d := range batch {
		logged[d.Key] = append(logged[d.Key], d.ID)
	}
	pulls := pullStatements(logged)
	if h.ends != nil && carried != nil && h.busy() {
		if h.ends.carry(pulls) {
			// Not when some wait already: pushed back at each flush, the
			// timer might never fire.
			carried.Reset(historyCarryWait)
		}
		return batch[:0]
	}
	if err := sendPulls(ctx, h.tasks, pulls); err != nil {
		h.onError(err)
	}
	return batch[:0]
}

// sendCarried sends alone the pulls no batch of run ends took.
func (h *historian) sendCarried() {
	if h.ends == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.writeTimeout)
	defer cancel()
	if err := sendPulls(ctx, h.tasks, h.ends.takeCarried()); err != nil {
		h.onError(err)
	}
}
