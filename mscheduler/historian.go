package mscheduler

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Batching of history writes: records are written together when this many
// are waiting, or when the oldest has waited historyFlushEvery.
const (
	historyBatch      = 100
	historyFlushEvery = time.Second
	historyQueue      = 1024
)

// historian writes the history records of the runs this consumer ended,
// in batches, then pulls their ids from the tasks' unlogged lists. Its
// loop owns the batch. A record it cannot write (the queue full, the
// server unreachable) is not lost: its id stays in unlogged, and the
// maintenance pass writes it later from the task's runs.
type historian struct {
	tasks, history *mongo.Collection
	retention      Retention
	writeTimeout   time.Duration
	log            *slog.Logger
	onError        func(error)

	queue chan historyDoc // written by run ends, read by the loop
}

func newHistorian(tasks *mongo.Collection, retention Retention, writeTimeout time.Duration, log *slog.Logger, onError func(error)) *historian {
	return &historian{tasks: tasks, history: historyCollection(tasks), retention: retention, writeTimeout: writeTimeout,
		log: log, onError: onError, queue: make(chan historyDoc, historyQueue)}
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
	for {
		select {
		case d := <-h.queue:
			if len(batch) == 0 {
				timer.Reset(historyFlushEvery)
			}
			batch = append(batch, d)
			if len(batch) >= historyBatch {
				batch = h.flush(batch)
			}
		case <-timer.C:
			batch = h.flush(batch)
		case <-ctx.Done():
			for {
				select {
				case d := <-h.queue:
					batch = append(batch, d)
				default:
					h.flush(batch)
					return
				}
			}
		}
	}
}

// flush writes a batch and returns it emptied for reuse.
func (h *historian) flush(batch []historyDoc) []historyDoc {
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
	if err := pullLogged(ctx, h.tasks, logged); err != nil {
		h.onError(err)
	}
	return batch[:0]
}
