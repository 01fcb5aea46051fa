package mscheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// The history collection's machinery is internal/history's.

func historyCollection(coll *mongo.Collection) *mongo.Collection { return history.Collection(coll) }

// RunFilter selects run records for Producer.Runs. Empty fields select
// everything.
type RunFilter struct {
	Key      string
	Outcome  Outcome
	WorkerID string
	// Since and Until bound the runs' finish times: Since included, Until
	// not.
	Since, Until time.Time
	// After is the Next of the previous page, to read on from it.
	After string
	// Limit bounds the runs of a page. Defaults to [RunsLimitDefault], at
	// most [RunsLimitMax].
	Limit int
}

// Limits of RunFilter.Limit.
const (
	RunsLimitDefault = 50
	RunsLimitMax     = 1000
)

// RunPage is one page of run records, newest first.
type RunPage struct {
	Runs []RunInfo
	// Next reads the following page (as RunFilter.After); empty on the
	// last page.
	Next string
}

// Runs returns the task collection's run records that f selects, newest
// first, a page at a time. Every filter is served by an index of the
// history collection (by key, worker or outcome, then finish time). A
// record that cannot be read as stored does not fail the call: it is
// listed with what could be read, and its RunInfo.Problem.
func (p *Producer[P]) Runs(ctx context.Context, f RunFilter) (*RunPage, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = RunsLimitDefault
	case limit < 0 || limit > RunsLimitMax:
		return nil, invalid("Limit", "must be from 1 to %d, got %d", RunsLimitMax, f.Limit)
	}
	filter := bson.D{}
	if f.Key != "" {
		filter = append(filter, bson.E{Key: fKey, Value: f.Key})
	}
	if f.WorkerID != "" {
		filter = append(filter, bson.E{Key: "worker_id", Value: f.WorkerID})
	}
	if f.Outcome != "" {
		filter = append(filter, bson.E{Key: "outcome", Value: f.Outcome})
	}
	finished := bson.D{}
	if !f.Since.IsZero() {
		finished = append(finished, bson.E{Key: "$gte", Value: f.Since})
	}
	if !f.Until.IsZero() {
		finished = append(finished, bson.E{Key: "$lt", Value: f.Until})
	}
	if len(finished) > 0 {
		filter = append(filter, bson.E{Key: "finished", Value: finished})
	}
	base := slices.Clip(filter)
	var after runPos
	if f.After != "" {
		var err error
		if after, err = decodeCursor(f.After); err != nil {
			return nil, invalid("After", "is not a cursor this library gave: %v", err)
		}
		filter = append(base, bson.E{Key: "$or", Value: after.after()})
	}
	raws, err := p.findRuns(ctx, filter, limit+1)
	if err != nil {
		return nil, err
	}
	// The filter after a sound record's cursor compares dates with dates,
	// as it always did. Records whose finished is not a date (edited by
	// hand) sort after every date: once the dates are read, read on into
	// them. (Since and Until select dates only.)
	if f.After != "" && after.sound() && len(raws) <= limit && f.Since.IsZero() && f.Until.IsZero() {
		more, err := p.findRuns(ctx, append(base, bson.E{Key: "$or", Value: belowBracket(rankOf(bson.TypeDateTime))}), limit+1-len(raws))
		if err != nil {
			return nil, err
		}
		raws = append(raws, more...)
	}
	page := &RunPage{Runs: make([]RunInfo, 0, min(len(raws), limit))}
	for i, raw := range raws {
		if i == limit {
			page.Next = encodeCursor(posOf(raws[limit-1]))
			if page.Next == f.After { // cannot happen with a strict filter; never loop on it
				page.Next = ""
			}
			break
		}
		info, prob := readHistoryRecord(raw)
		if prob != nil {
			info.Problem = prob.Error()
		}
		page.Runs = append(page.Runs, info)
	}
	return page, nil
}

// findRuns reads up to n history records, in the order of Runs, as stored.
func (p *Producer[P]) findRuns(ctx context.Context, filter bson.D, n int) ([]bson.Raw, error) {
	cur, err := findPage(ctx, historyCollection(p.coll), pageQuery{filter: filter,
		sort: bson.D{{Key: "finished", Value: -1}, {Key: fID, Value: -1}}, limit: int64(n)})
	if err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("mscheduler: runs: %w", err)
	}
	return raws, nil
}

// readHistoryRecord reads a record of the history collection for Runs,
// through the gate. It never fails: a field that does not decode is left
// zero, and the problem names the first such field, or else a finish
// time that is not a date.
func readHistoryRecord(raw bson.Raw) (RunInfo, *problem) {
	d, prob := stored.DecodeHistory(raw)
	info := newRunInfo(d.Record)
	info.Key = d.Key
	return info, prob
}
