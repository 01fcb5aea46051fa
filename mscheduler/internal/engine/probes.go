package engine

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/internal/claimchoice"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Probes: single mechanisms of the engine, run alone on a collection or
// on a document, for the public package's tests of what a consumer
// writes and reads.

// ClaimBothWays claims one slot of the task key for worker "w" with the
// batch claim's statement fenced on its rev, and returns the task as the
// server left it and as the claim builds it from the task as read, both
// without runs. exact says the task could be built at all. A stretch
// claims the run at that longer lease, as on a server too slow for the
// task's own (0: none).
func ClaimBothWays(ctx context.Context, coll *mongo.Collection, key string, stretch time.Duration) (server, local bson.Raw, exact bool, err error) {
	noRuns := options.FindOne().SetProjection(bson.D{{Key: stored.FRuns, Value: 0}})
	before, err := coll.FindOne(ctx, bson.D{{Key: stored.FID, Value: key}}, noRuns).Raw()
	if err != nil || !taskstate.ExactCandidate(before) {
		return nil, nil, false, err
	}
	c := &Engine{cfg: &Config{WorkerID: "w"}}
	st := &claimState{}
	st.leases.observe(3 * time.Second)
	if stretch > 0 {
		st.stretch.need, st.stretch.to = time.Hour, stretch
	}
	now, runID := time.Now(), newRunID()
	cd, _ := claimchoice.Of(before)
	filter := append(c.claimFilterOf(st, cd, now), bson.E{Key: stored.FRev, Value: before.Lookup(stored.FRev)})
	res, err := coll.UpdateOne(ctx, filter, c.claimUpdateOf(st, runID, now, cd))
	if err != nil {
		return nil, nil, true, err
	}
	if res.MatchedCount != 1 {
		return nil, nil, true, fmt.Errorf("the claim matched %d tasks", res.MatchedCount)
	}
	server, err = coll.FindOne(ctx, bson.D{{Key: stored.FID, Value: key}}, noRuns).Raw()
	if err != nil {
		return nil, nil, true, err
	}
	timeout := stored.FromMS(cd.WorkerTimeoutMS)
	local, err = taskstate.ClaimedAsRead(before, "w", c.claimHolder(st, runID, now, timeout), now, c.claimExpiry(st, now, timeout))
	return server, local, true, err
}

// ReadClaims reads back the runs of worker "w" on the given tasks, as a
// batch claim does after the server said matched of its statements
// matched, and returns the keys and run ids found.
func ReadClaims(ctx context.Context, coll *mongo.Collection, keys, runIDs []string, matched int64) (map[string]string, error) {
	c := &Engine{cfg: &Config{WorkerID: "w"}, coll: coll}
	chosen := make([]claimchoice.Candidate, len(keys))
	for i, key := range keys {
		chosen[i] = claimchoice.Candidate{Key: key, ID: taskstate.KeyID(key)}
	}
	won, err := c.readClaims(ctx, chosen, runIDs, matched)
	out := map[string]string{}
	for _, cl := range won {
		out[cl.raw.Lookup(stored.FID).StringValue()] = cl.runID
	}
	return out, err
}

// DecodeClaimed reads a claimed task of worker workerID as the engine
// does before it runs it, through the gate of docs and the typed layer's
// prepare.
func DecodeClaimed(raw bson.Raw, workerID string, docs Documents, prepare PrepareFunc) (*stored.Task, *Run, *stored.Problem) {
	e := &Engine{cfg: &Config{WorkerID: workerID, Documents: docs, Prepare: prepare}}
	doc, run, _, prob := e.decodeClaimed(raw)
	return doc, run, prob
}

// CarriedPulls is how many history-mark statements wait to ride with the
// engine's next batch of run ends.
func (c *Engine) CarriedPulls() int {
	if c.ends == nil {
		return 0
	}
	return c.ends.Carried()
}

// CandidateLimit is how many candidates a claim of k slots reads among
// peers consumers, keeping spares or not.
func CandidateLimit(k, peers int, spares bool) int { return candidateLimit(k, peers, spares) }

// PassOverMin is the least a consumer leaves a task of another share to
// its own consumer; ReannounceGap bounds how often lost tasks bring an
// announce forward; AnnounceSoon bounds the wait for a second announce.
const (
	QuietPollMaxStream  = quietPollMaxStream
	QuietSweepMaxStream = quietSweepMaxStream
	QuietSweepMaxPoll   = quietSweepMaxPoll
)

const (
	PassOverMin   = passOverMin
	ReannounceGap = reannounceGap
	AnnounceSoon  = announceSoon
)

// SharedPollServes says the database's shared poll serves the consumer
// (see dbpoll.go).
func (c *Engine) SharedPollServes() bool { return c.poll.Serving() }
