package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// Version is this library's version, reported by worker processes in the
// registry and by the operator command.
const Version = "0.5.0"

// WorkersCollection is the collection, in the database of the task
// collections, where worker processes announce themselves: one document
// per process, renewed every heartbeat interval, removed on a clean stop.
const WorkersCollection = "mscheduler.workers"

// StaleAfterBeats is how many heartbeat intervals may pass without one
// before a worker is reported stale; WorkerForgetAfter is when its
// document is deleted.
const (
	StaleAfterBeats   = 3
	WorkerForgetAfter = time.Hour
)

// WorkerInfo is a worker process as it announces itself. A document that
// cannot be read as stored is still listed by ListWorkers, with Problem
// saying why and the fields that could be read.
type WorkerInfo struct {
	ID          string    `bson:"_id"`
	Host        string    `bson:"host"`
	PID         int       `bson:"pid"`
	Version     string    `bson:"version"`
	Collections []string  `bson:"collections"`
	Groups      []string  `bson:"groups"`
	Capacity    int       `bson:"capacity"` // handler slots, over every collection
	Running     int       `bson:"running"`  // runs held at the last heartbeat
	StartedAt   time.Time `bson:"started_at"`
	LastSeen    time.Time `bson:"last_seen"` // the server's time of the last heartbeat
	// HeartbeatMS is the interval between its heartbeats.
	HeartbeatMS int64 `bson:"heartbeat_ms"`
	// RunIDs are the runs an executor holds through the HTTP gateway,
	// whose task documents name the gateway's worker as their holder;
	// empty for a worker process, whose runs the documents name.
	RunIDs []string `bson:"run_ids,omitempty"`
	// Stale says no heartbeat came for StaleAfterBeats intervals: the
	// process is dead or cut off. Computed by ListWorkers; not stored.
	Stale bool `bson:"-"`
	// Problem names the field of the stored document that cannot be read
	// (edited by hand into the wrong shape, say pid: "abc") and why, in
	// the words used for tasks ("field pid must be a whole number, got
	// string \"abc\""); that field is left zero. Empty for a sound
	// document. Computed by ListWorkers; not stored.
	Problem string `bson:"-"`
}

func workers(db *mongo.Database) *mongo.Collection { return db.Collection(WorkersCollection) }

// workerFields are the stored fields of a worker, with their Go types.
var workerFields = stored.FieldsOf(reflect.TypeFor[WorkerInfo]())

// Heartbeat writes a worker's document (it replaces the last one) with
// the server's time as LastSeen. The worker runtime calls it every
// interval; now and then it also deletes workers not seen for
// WorkerForgetAfter, on servers where no TTL index does.
func Heartbeat(ctx context.Context, db *mongo.Database, w WorkerInfo) error {
	set, err := bson.Marshal(w)
	if err != nil {
		return fmt.Errorf("mscheduler: heartbeat: %w", err)
	}
	var fields bson.D
	if err := bson.Unmarshal(set, &fields); err != nil {
		return fmt.Errorf("mscheduler: heartbeat: %w", err)
	}
	kept := fields[:0]
	for _, f := range fields {
		if f.Key != fID && f.Key != "last_seen" {
			kept = append(kept, f)
		}
	}
	update := bson.D{{Key: "$set", Value: kept}, {Key: "$currentDate", Value: bson.D{{Key: "last_seen", Value: true}}}}
	_, err = workers(db).UpdateOne(ctx, bson.D{{Key: fID, Value: w.ID}}, update, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("mscheduler: heartbeat of %s: %w", w.ID, err)
	}
	return nil
}

// Deregister removes a worker's document, on a clean stop.
func Deregister(ctx context.Context, db *mongo.Database, id string) error {
	if _, err := workers(db).DeleteOne(ctx, bson.D{{Key: fID, Value: id}}); err != nil {
		return fmt.Errorf("mscheduler: deregister %s: %w", id, err)
	}
	return nil
}

// EnsureWorkerIndexes creates the index that deletes worker documents not
// renewed for WorkerForgetAfter (a TTL index where the server has them;
// otherwise ForgetWorkers does it). Where it is there already, as at
// every start but the first, it costs one listIndexes and writes nothing.
func EnsureWorkerIndexes(ctx context.Context, db *mongo.Database) error {
	keys := bson.D{{Key: "last_seen", Value: 1}}
	ttl := mongo.IndexModel{Keys: keys,
		Options: options.Index().SetName("last_seen").SetExpireAfterSeconds(int32(WorkerForgetAfter / time.Second))}
	if have, err := indexesOf(ctx, workers(db)); err == nil && hasIndex(have, ttl) {
		return nil // as TTL, or plain on a server without TTL indexes
	}
	_, err := workers(db).Indexes().CreateOne(ctx, ttl)
	if isNotImplemented(err) {
		_, err = workers(db).Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetName("last_seen")})
	}
	if err != nil {
		return fmt.Errorf("mscheduler: create indexes on %s: %w", WorkersCollection, err)
	}
	return nil
}

// ForgetWorkers deletes the workers not seen for WorkerForgetAfter.
func ForgetWorkers(ctx context.Context, db *mongo.Database) (int64, error) {
	now, err := ServerTime(ctx, db)
	if err != nil {
		return 0, err
	}
	res, err := workers(db).DeleteMany(ctx, bson.D{{Key: "last_seen", Value: op("$lt", now.Add(-WorkerForgetAfter))}})
	if err != nil {
		return 0, fmt.Errorf("mscheduler: forget workers: %w", err)
	}
	return res.DeletedCount, nil
}

// ListWorkers returns the worker processes that announced themselves in
// db, by id, each marked stale when no heartbeat came for StaleAfterBeats
// of its intervals (by the server's clock). A document that cannot be
// read as stored does not fail the call: it is listed with what could be
// read (its id, when it is a string) and its Problem; one whose last_seen
// cannot be read is stale.
func ListWorkers(ctx context.Context, db *mongo.Database) ([]WorkerInfo, error) {
	now, err := ServerTime(ctx, db)
	if err != nil {
		return nil, err
	}
	cur, err := findPage(ctx, workers(db), pageQuery{filter: bson.D{}, sort: bson.D{{Key: fID, Value: 1}}, limit: 10_000})
	if err != nil {
		return nil, fmt.Errorf("mscheduler: list workers: %w", err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("mscheduler: list workers: %w", err)
	}
	out := make([]WorkerInfo, len(raws))
	for i, raw := range raws {
		prob := stored.DecodeLenient(raw, workerFields, &out[i])
		if prob == nil {
			prob = stored.DateProblem(raw, "last_seen")
		}
		if prob == nil && (out[i].HeartbeatMS < 1 || out[i].HeartbeatMS > maxHeartbeatMS) {
			prob = stored.Problemf("heartbeat_ms", "must be from 1 to %d (%s), got %d", maxHeartbeatMS, fromMS(maxHeartbeatMS), out[i].HeartbeatMS)
		}
		if prob != nil {
			out[i].Problem = prob.Error()
		}
		beats := fromMS(min(max(out[i].HeartbeatMS, 1), maxHeartbeatMS))
		out[i].Stale = now.Sub(out[i].LastSeen) > StaleAfterBeats*beats
	}
	return out, nil
}

// maxHeartbeatMS is the longest heartbeat interval a worker record is
// read with: a longer one (edited by hand) would keep a dead worker
// reported alive past its forgetting, or overflow the reckoning.
const maxHeartbeatMS = int64(WorkerForgetAfter/time.Millisecond) / StaleAfterBeats

// ServerTime reads the server's clock (the hello reply's localTime).
func ServerTime(ctx context.Context, db *mongo.Database) (time.Time, error) {
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply); err != nil {
		return time.Time{}, fmt.Errorf("mscheduler: read server clock: %w", err)
	}
	return reply.LocalTime, nil
}

// isNotImplemented reports the server refusing a feature it lacks.
func isNotImplemented(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(codeNotImplemented)
}
