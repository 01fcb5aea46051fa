package mscheduler

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler/internal/claimchoice"
	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
	"github.com/mscheduler/mscheduler/mscheduler/internal/history"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
	"github.com/mscheduler/mscheduler/mscheduler/internal/upkeep"
)

// HotQuery is one of the library's hot-path queries as an explain command.
type HotQuery struct {
	Name    string
	Explain bson.D // the command to wrap in {explain: ...}
	InOrder bool   // sorted, and the index gives the order: no sort in memory
}

// HotQueries returns the queries a worker sends for every task, built by the
// same functions the library uses, as explainable commands on coll.
func HotQueries(coll string, now time.Time) []HotQuery {
	const worker, key, run = "w1", "k1", "r1"
	id := taskstate.KeyID(key)
	claimant := taskstate.Claimant{WorkerID: worker, Groups: []string{"g"}}
	claim := claimant.Due(now)
	endOf := &taskstate.End{ID: id, Fence: taskstate.RunFence(id, worker, run), Record: runRecord{Outcome: OutcomeSucceeded}, RunsKept: 20, Now: now}
	end := endOf.Cases()[0]
	return []HotQuery{
		{Name: "claim (findAndModify)", Explain: bson.D{{Key: "findAndModify", Value: coll}, {Key: "query", Value: claim}, {Key: "sort", Value: claimSort},
			{Key: "update", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: fRunning, Value: 1}}}}}}, InOrder: true},
		{Name: "claim candidates (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: claim}, {Key: "sort", Value: claimSort},
			{Key: "projection", Value: bson.D{{Key: fRuns, Value: 0}}}, {Key: "limit", Value: 64}}, InOrder: true},
		{Name: "claims read back (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{
			{Key: fID, Value: op("$in", bson.A{key, "k2"})},
			{Key: holderPath(worker, hRun), Value: op("$in", bson.A{run, "r2"})},
		}}}},
		{Name: "claims read back, running (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{
			{Key: fID, Value: op("$in", bson.A{key, "k2"})},
			{Key: holderPath(worker, hRun), Value: op("$in", bson.A{run, "r2"})},
			{Key: fStatus, Value: StatusRunning},
		}}}},
		{Name: "next due task (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: taskstate.Claimant{WorkerID: worker}.Future(now)},
			{Key: "sort", Value: bson.D{{Key: fRunAt, Value: 1}}}, {Key: "limit", Value: 1}}},
		{Name: "sweep (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: fNextExpiry, Value: op("$lte", now)}}},
			{Key: "sort", Value: bson.D{{Key: fNextExpiry, Value: 1}}}, {Key: "limit", Value: upkeep.SweepBatch}}},
		{Name: "ping (findAndModify)", Explain: bson.D{{Key: "findAndModify", Value: coll}, {Key: "query", Value: taskstate.RunFence(id, worker, run)},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: holderPath(worker, hLeaseUntil), Value: now}}}}}}},
		{Name: "run end (update)", Explain: bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: endOf.Filter(end)}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}}}}},
		}}}},
		{Name: "publish (update by key)", Explain: bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: fID, Value: key}}}, {Key: "u", Value: bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: fKey, Value: key}}}}}, {Key: "upsert", Value: true}},
		}}}},
		{Name: "filter by tag (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: fTags, Value: "reports"}}}}},
		{Name: "check for unclaimable documents (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: taskstate.Audit(now)}, {Key: "limit", Value: upkeep.CheckBatch}}},
		{Name: "lost claim lookup (find)", Explain: bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: bson.D{{Key: fStatus, Value: StatusRunning}, {Key: holderPath(worker, hRun), Value: run}}}}},
		{Name: "expire (update)", Explain: bson.D{{Key: "update", Value: coll}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: taskstate.LeaseFence(id, worker, run, now)}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: fRev, Value: 1}}}}}},
		}}}},
	}
}

// BuildTaskDoc validates and builds the stored form of a task as Publish
// does, at now, and checks the result the way a worker reads it back.
func BuildTaskDoc[P any](t Task[P], now time.Time) error {
	d, err := newTaskDoc(&t, TaskDefaults{}.withDefaults(), now, "")
	if err != nil {
		return err
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if d.Status == StatusFinished {
		return nil
	}
	claimed, err := claimedForm(raw)
	if err != nil {
		return err
	}
	back, _, prob := decodeClaimedAs[P](claimed, "w")
	if prob != nil {
		return fmt.Errorf("a published document fails inspection: %w", prob)
	}
	if back.Free != back.Concurrency-1 {
		return fmt.Errorf("free %d != concurrency %d - 1 after a claim", back.Free, back.Concurrency)
	}
	if back.Plan != nil && back.RunAt.Before(back.Plan.Planned) {
		return fmt.Errorf("run_at %s before the planned time %s", back.RunAt, back.Plan.Planned)
	}
	return nil
}

// claimedForm is a stored task as a claim by worker "w" leaves it.
func claimedForm(raw bson.Raw) (bson.Raw, error) {
	var m bson.M
	if err := bson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	m[fStatus] = StatusRunning
	m[fHolders] = bson.M{"w": holder{Run: "r", Started: time.Now(), LeaseUntil: time.Now().Add(time.Minute)}}
	if f, ok := m[fFree].(int32); ok {
		m[fFree] = f - 1
	}
	if n, ok := m[fRunning].(int32); ok {
		m[fRunning] = n + 1
	}
	return bson.Marshal(m)
}

// DecodeForRun decodes a claimed document as a worker does and builds the
// handler's task from it; it reports whether the run could go ahead, and
// fails (it does not panic) on any document. A refusal names a field.
func DecodeForRun(raw []byte) (ok bool, field string, err error) {
	doc, _, prob := decodeClaimedAs[map[string]any](bson.Raw(raw), "w")
	if prob != nil {
		return false, prob.Field, prob
	}
	if doc.Plan != nil {
		_ = newPlanAdvance(doc, time.Now(), time.Now())
	}
	return true, "", nil
}

// Inspect is the worker's inspection of a stored document: the field at
// fault and why, or empty strings.
func Inspect(raw []byte) (field, reason string) {
	if p := inspect(bson.Raw(raw)); p != nil {
		return p.Field, p.Reason
	}
	return "", ""
}

// ClaimBothWays claims one slot of the task key for worker "w" with the
// batch claim's statement fenced on its rev, and returns the task as the
// server left it and as the claim builds it from the task as read.
var ClaimBothWays = engine.ClaimBothWays

// ReadClaims reads back the runs of worker "w" on the given tasks, as a
// batch claim does after the server said how many of its statements
// matched.
var ReadClaims = engine.ReadClaims

// CarriedPulls is how many history-mark statements wait to ride with the
// consumer's next batch of run ends.
func CarriedPulls[P, R any](c *Consumer[P, R]) int { return c.eng.CarriedPulls() }

// QuietFactors are the factors a quiet consumer stretches its poll and its
// sweep interval by now.
func QuietFactors[P, R any](c *Consumer[P, R]) (poll, sweep int) { return c.eng.QuietFactors() }

// SharedPollServes says the consumer's database's shared poll serves it.
func SharedPollServes[P, R any](c *Consumer[P, R]) bool { return c.eng.SharedPollServes() }

// The most a quiet consumer stretches its poll and its sweeps, with a
// change stream and without.
const (
	QuietPollMaxStream  = engine.QuietPollMaxStream
	QuietSweepMaxStream = engine.QuietSweepMaxStream
	QuietSweepMaxPoll   = engine.QuietSweepMaxPoll
)

// SendPullsFor removes the history marks of one run of each key, as the
// historian does once their records are written.
func SendPullsFor(ctx context.Context, coll *mongo.Collection, keys []string) error {
	logged := map[string][]string{}
	for _, key := range keys {
		logged[key] = []string{"run-of-" + key}
	}
	return history.SendPulls(ctx, coll, history.Pulls(logged))
}

// ShareOf is the share among peers that a task key falls in (see choose).
func ShareOf(key string, peers int) int { return claimchoice.ShareOf(key, peers) }

// CandidateLimit is how many candidates a claim of k slots reads among
// peers consumers, keeping spares or not.
func CandidateLimit(k, peers int, spares bool) int { return engine.CandidateLimit(k, peers, spares) }

// PassOverMin is the least a consumer leaves a task of another share to
// its own consumer; ReannounceGap bounds how often lost tasks bring an
// announce forward; AnnounceSoon bounds the wait for a second announce.
const (
	PassOverMin   = engine.PassOverMin
	ReannounceGap = engine.ReannounceGap
	AnnounceSoon  = engine.AnnounceSoon
)

// decodeClaimedAs reads a claimed task as a Consumer of params P of worker
// workerID does.
func decodeClaimedAs[P any](raw bson.Raw, workerID string) (*taskDoc, *Run, *problem) {
	return engine.DecodeClaimed(raw, workerID, documents, typedPrepare(func(context.Context, *Task[P]) (struct{}, error) {
		return struct{}{}, nil
	}, nil))
}
