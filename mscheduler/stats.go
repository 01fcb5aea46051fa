package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StatsTimeout bounds each query of Stats (sent as maxTimeMS): counting
// must never load the server that the workers use.
const StatsTimeout = 5 * time.Second

// Stats is a summary of a task collection.
type Stats struct {
	// ByStatus counts the tasks in each status.
	ByStatus map[Status]int64
	// OldestDue is the run_at of the claimable task that has waited
	// longest (due, a slot free, not paused); zero when none waits.
	OldestDue time.Time
	// Due is the queue depth: the claimable tasks whose time has come (due,
	// a slot free, not paused), which idle workers would take now.
	Due int64
	// RunsLastHour and FailuresLastHour count the runs that ended in the
	// last hour, and those of them that failed or expired (from the run
	// history).
	RunsLastHour, FailuresLastHour int64
	// At is the server time the summary was taken at.
	At time.Time
}

// Stats counts the collection's tasks by status and its recent runs. Every
// query is served by an index and bounded by StatsTimeout.
func (p *Producer[P]) Stats(ctx context.Context) (*Stats, error) {
	if err := p.clock.Ensure(ctx, p.coll.Database()); err != nil {
		return nil, err
	}
	now := p.clock.Now()
	byStatus, err := CountByStatus(ctx, p.coll)
	if err != nil {
		return nil, err
	}
	s := &Stats{ByStatus: byStatus, At: now}
	qctx, cancel := context.WithTimeout(ctx, StatsTimeout)
	defer cancel()
	waiting := bson.D{{Key: fStatus, Value: op("$in", claimableStatuses)}, {Key: fRunAt, Value: op("$lte", now)},
		{Key: fFree, Value: op("$gt", 0)},
		{Key: fPaused, Value: op("$ne", true)}}
	oldest, err := p.coll.FindOne(qctx, waiting,
		options.FindOne().SetSort(bson.D{{Key: fRunAt, Value: 1}}).SetProjection(bson.D{{Key: fRunAt, Value: 1}})).Raw()
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: stats: %w", err)
	}
	if err == nil {
		s.OldestDue, _ = oldest.Lookup(fRunAt).TimeOK() // the filter holds dates only
	}
	if s.Due, err = p.coll.CountDocuments(qctx, waiting); err != nil {
		return nil, fmt.Errorf("mscheduler: stats: %w", err)
	}
	history := historyCollection(p.coll)
	since := op("$gte", now.Add(-time.Hour))
	if s.RunsLastHour, err = history.CountDocuments(qctx, bson.D{{Key: "finished", Value: since}}); err != nil {
		return nil, fmt.Errorf("mscheduler: stats: %w", err)
	}
	failed := bson.D{{Key: "outcome", Value: op("$in", bson.A{OutcomeFailed, OutcomeExpired})}, {Key: "finished", Value: since}}
	if s.FailuresLastHour, err = history.CountDocuments(qctx, failed); err != nil {
		return nil, fmt.Errorf("mscheduler: stats: %w", err)
	}
	return s, nil
}

// CountByStatus counts the tasks of coll in each status the library
// writes, one count per status served by the claim index, bounded by
// StatsTimeout.
func CountByStatus(ctx context.Context, coll *mongo.Collection) (map[Status]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, StatsTimeout)
	defer cancel()
	out := make(map[Status]int64, len(knownStatuses))
	for _, s := range knownStatuses {
		n, err := coll.CountDocuments(ctx, bson.D{{Key: fStatus, Value: s}})
		if err != nil {
			return nil, fmt.Errorf("mscheduler: count %s tasks: %w", s, err)
		}
		out[s] = n
	}
	return out, nil
}
