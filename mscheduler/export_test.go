package mscheduler

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// HotQuery is one of the library's hot-path queries as an explain command.
type HotQuery struct {
	Name    string
	Explain bson.D // the command to wrap in {explain: ...}
}

// HotQueries returns the queries a worker sends for every task, built by the
// same functions the library uses, as explainable commands on coll.
func HotQueries(coll string, now time.Time) []HotQuery {
	const worker, key, run = "w1", "k1", "r1"
	claim := claimFilter(worker, []string{"g"}, nil, now)
	end := (&runEnd{fence: fence(key, worker, run), record: runRecord{Outcome: OutcomeSucceeded}, runsKept: 20, now: now}).cases()[0]
	return []HotQuery{
		{"claim (findAndModify)", bson.D{{Key: "findAndModify", Value: coll}, {Key: "query", Value: claim}, {Key: "sort", Value: claimSort},
			{Key: "update", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: fRunning, Value: 1}}}}}}},
		{"next due task (find)", bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: futureFilter(worker, nil, nil, now)},
			{Key: "sort", Value: bson.D{{Key: fRunAt, Value: 1}}}, {Key: "limit", Value: 1}}},
		{"sweep (find)", bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: fNextExpiry, Value: op("$lte", now)}}},
			{Key: "sort", Value: bson.D{{Key: fNextExpiry, Value: 1}}}, {Key: "limit", Value: sweepBatch}}},
		{"ping (findAndModify)", bson.D{{Key: "findAndModify", Value: coll}, {Key: "query", Value: fence(key, worker, run)},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: holderPath(worker, hLeaseUntil), Value: now}}}}}}},
		{"run end (update)", bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: (&runEnd{fence: fence(key, worker, run)}).filter(end)}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}}}}},
		}}}},
		{"publish (update by key)", bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: fID, Value: key}}}, {Key: "u", Value: bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: fKey, Value: key}}}}}, {Key: "upsert", Value: true}},
		}}}},
		{"filter by tag (find)", bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: fTags, Value: "reports"}}}}},
	}
}
