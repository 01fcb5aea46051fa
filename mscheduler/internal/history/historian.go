package history

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/retry"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
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

// Historian writes the history records of the runs this consumer ended,
// in batches, then pulls their ids from the tasks' unlogged lists. Its
// loop owns the batch. A record it cannot write (the queue full, the
// server unreachable) is not lost: its id stays in unlogged, and the
// maintenance pass writes it later from the task's runs.
//
// While the consumer is busy, the pulls ride with its next run end (a
// batch, or a run end alone) instead of costing a command of their own;
// what no run end took within historyCarryWait is sent alone. An idle
// consumer sends them at once: no run end is coming, and a mark waiting
// holds back the deletion of its task (retention, DeleteFinished).
type Historian struct {
	tasks, history *mongo.Collection
	retention      taskstate.Retention
	writeTimeout   time.Duration
	log            *slog.Logger
	onError        func(error)
	ends           Carrier     // nil when run ends are written alone
	busy           func() bool // a run end is on its way

	queue chan stored.HistoryRecord // written by run ends, read by the loop
}

// NewHistorian makes the historian of a consumer of tasks. ends, when not
// nil, is the run-end batcher the removals of history marks ride with
// while busy says a run end is on its way; onError hears of the records
// it could not write (the maintenance pass writes them later).
func NewHistorian(tasks *mongo.Collection, retention taskstate.Retention, writeTimeout time.Duration, log *slog.Logger, onError func(error),
	ends Carrier, busy func() bool) *Historian {
	return &Historian{tasks: tasks, history: Collection(tasks), retention: retention, writeTimeout: writeTimeout,
		log: log, onError: onError, ends: ends, busy: busy, queue: make(chan stored.HistoryRecord, historyQueue)}
}

// Add queues a run's record; it never blocks.
func (h *Historian) Add(key string, r stored.RunRecord) {
	select {
	case h.queue <- Record(key, r, h.retention):
	default: // the maintenance pass writes it from the task's runs
	}
}

// Loop writes batches until ctx is done, then writes what is queued.
func (h *Historian) Loop(ctx context.Context) {
	var batch []stored.HistoryRecord
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

// errWriteTimeout is the cause of a history write given up after the
// write timeout.
var errWriteTimeout = errors.New("mscheduler: history write timed out")

// flush writes a batch and returns it emptied for reuse. The pulls go with
// the next run end when the consumer is busy and carried (the timer that
// sends them alone if no run end took them) is given; alone otherwise.
func (h *Historian) flush(batch []stored.HistoryRecord, carried *time.Timer) []stored.HistoryRecord {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := retry.Bounded(context.Background(), h.writeTimeout, errWriteTimeout)
	defer cancel()
	if err := Insert(ctx, h.history, batch); err != nil {
		h.onError(err)
		return batch[:0]
	}
	logged := map[string][]string{}
	for _, d := range batch {
		logged[d.Key] = append(logged[d.Key], d.ID)
	}
	pulls := Pulls(logged)
	if h.ends != nil && carried != nil && h.busy() {
		if h.ends.Carry(pulls) {
			// Not when some wait already: pushed back at each flush, the
			// timer might never fire.
			carried.Reset(historyCarryWait)
		}
		return batch[:0]
	}
	if err := SendPulls(ctx, h.tasks, pulls); err != nil {
		h.onError(err)
	}
	return batch[:0]
}

// sendCarried sends alone the pulls no batch of run ends took.
func (h *Historian) sendCarried() {
	if h.ends == nil {
		return
	}
	ctx, cancel := retry.Bounded(context.Background(), h.writeTimeout, errWriteTimeout)
	defer cancel()
	if err := SendPulls(ctx, h.tasks, h.ends.TakeCarried()); err != nil {
		h.onError(err)
	}
}

// Carrier takes statements to send with the next batch of run ends (the
// run-end batcher), and gives back those no batch took.
type Carrier interface {
	Carry(models []mongo.WriteModel) (first bool)
	TakeCarried() []mongo.WriteModel
}
