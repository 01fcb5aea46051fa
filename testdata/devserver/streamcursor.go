package main

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// stream is one change stream cursor.
type stream struct {
	id     int64
	scope  scope
	ns     string // the cursor's namespace, as replies name it
	opts   eventOptions
	pipe   pipeline
	epoch  uint64
	killed chan struct{} // closed by killCursors: a waiting getMore returns

	busy  sync.Mutex // held by the getMore in progress; guards what follows
	pos   uint64     // the history position read up to
	ended bool       // an invalidate was delivered: the cursor closes with this batch
	end   bson.Raw   // the invalidate's token

	used atomic.Int64 // when a command last used the cursor, in Unix nanoseconds
}

func (st *stream) touch()              { st.used.Store(time.Now().UnixNano()) }
func (st *stream) lastUsed() time.Time { return time.Unix(0, st.used.Load()) }
func (st *stream) resumeToken() bson.Raw {
	if st.ended {
		return st.end
	}
	return token{epoch: st.epoch, seq: st.pos}.doc()
}

// batchBytes bounds the events of one batch, well under a reply's 48 MB.
const batchBytes = 8 << 20

// next reads the events after st.pos, at most limit of them, and returns them with a channel
// closed at the history's next change; st.busy is held.
func (st *stream) next(h *history, limit int) ([]bson.Raw, <-chan struct{}, error) {
	changes, changed, ok := h.since(st.pos)
	if !ok {
		return nil, nil, historyLost("the stream fell more than the history's %d changes behind", len(h.ring))
	}
	var docs []bson.Raw
	size := 0
	for _, c := range changes {
		if len(docs) >= limit || size >= batchBytes {
			break
		}
		if !st.sees(c) {
			st.pos = c.seq
			continue
		}
		if c.op == opLost {
			return nil, nil, historyLost("a write to %s.%s could not be read: %s", c.db, c.coll, c.reason)
		}
		docs, size = st.deliver(docs, size, eventDoc(c, st.epoch, st.opts, false))
		st.pos = c.seq
		if st.invalidatedBy(c) {
			docs, _ = st.deliver(docs, size, eventDoc(c, st.epoch, st.opts, true))
			st.ended, st.end = true, token{epoch: st.epoch, seq: c.seq, invalidate: true}.doc()
			break
		}
	}
	return docs, changed, nil
}

func (st *stream) deliver(docs []bson.Raw, size int, event bson.Raw) ([]bson.Raw, int) {
	if out, keep := st.pipe.apply(event); keep {
		return append(docs, out), size + len(out)
	}
	return docs, size
}

// sees says whether the stream delivers a change: a collection stream sees its collection, a
// database stream its database, a cluster stream everything.
func (st *stream) sees(c *change) bool {
	switch {
	case c.op == opGap:
		return false
	case st.scope.cluster:
		return true
	case st.scope.db != c.db:
		return false
	case st.scope.coll == "":
		return true
	}
	return c.coll == st.scope.coll || c.op == opLost && c.coll == ""
}

// invalidatedBy says whether c ends the stream: the drop of its collection, the drop of its
// database.
func (st *stream) invalidatedBy(c *change) bool {
	switch {
	case st.scope.cluster:
		return false
	case st.scope.coll == "":
		return c.op == opDropDatabase
	}
	return c.op == opDrop
}

func historyLost(format string, args ...any) error {
	return newCommandError(codeChangeStreamHistLost,
		"Resume of change stream was not possible, as the resume point may no longer be in the oplog: "+format, args...)
}

const codeCursorKilled = 237

// getMore answers a getMore on a stream cursor: the events since the last batch, waiting up to
// maxTimeMS (one second by default) for the first one, without holding the front's lock.
func (s *streams) getMore(cmd *command) (bson.D, error) {
	id, _ := cmd.body.Lookup("getMore").AsInt64OK()
	st := s.cursor(id)
	if st == nil {
		return nil, newCommandError(codeCursorNotFound, "cursor id %d not found", id)
	}
	if !st.busy.TryLock() {
		return nil, newCommandError(codeCursorInUse, "cursor id %d is already in use", id)
	}
	defer st.busy.Unlock()
	st.touch()
	defer st.touch()

	limit := math.MaxInt
	if n, ok := cmd.body.Lookup("batchSize").AsInt64OK(); ok && n > 0 {
		limit = int(n)
	}
	await := defaultAwait
	if ms, ok := cmd.body.Lookup("maxTimeMS").AsInt64OK(); ok && ms > 0 {
		await = time.Duration(ms) * time.Millisecond
	}
	timer := time.NewTimer(await)
	defer timer.Stop()

	for {
		docs, changed, err := st.next(s.hist, limit)
		if err != nil {
			s.close(id)
			return nil, err
		}
		if len(docs) > 0 || st.ended {
			return s.batchReply(st, "nextBatch", docs), nil
		}
		if err := s.wait(st, changed, timer.C); err != nil {
			if errors.Is(err, errAwaitOver) {
				return s.batchReply(st, "nextBatch", nil), nil
			}
			return nil, err
		}
	}
}

// errAwaitOver ends a getMore with an empty batch: its maxTimeMS is over, or the front stops.
var errAwaitOver = errors.New("await time over")

// wait waits for the history to change, counted in s.waiting.
func (s *streams) wait(st *stream, changed <-chan struct{}, timeout <-chan time.Time) error {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	select {
	case <-changed:
		return nil
	case <-timeout:
		s.timeouts.Add(1)
		return errAwaitOver
	case <-s.done:
		return errAwaitOver
	case <-st.killed:
		return newCommandError(codeCursorKilled, "cursor id %d was killed", st.id)
	}
}

// batchReply is a cursor reply with docs; an ended stream's cursor is closed with it.
func (s *streams) batchReply(st *stream, batch string, docs []bson.Raw) bson.D {
	id := st.id
	if st.ended {
		s.close(id)
		id = 0
	}
	arr := make(bson.A, len(docs))
	for i, d := range docs {
		arr[i] = d
	}
	return bson.D{
		{Key: "cursor", Value: bson.D{
			{Key: batch, Value: arr},
			{Key: "postBatchResumeToken", Value: st.resumeToken()},
			{Key: "id", Value: id},
			{Key: "ns", Value: st.ns},
		}},
		{Key: "ok", Value: 1.0},
	}
}

// killCursors closes stream cursors.
func (s *streams) killCursors(cmd *command) bson.D {
	killed, notFound := bson.A{}, bson.A{}
	for _, id := range cursorIDs(cmd) {
		if s.close(id) {
			killed = append(killed, id)
		} else {
			notFound = append(notFound, id)
		}
	}
	return bson.D{
		{Key: "cursorsKilled", Value: killed},
		{Key: "cursorsNotFound", Value: notFound},
		{Key: "cursorsAlive", Value: bson.A{}},
		{Key: "cursorsUnknown", Value: bson.A{}},
		{Key: "ok", Value: 1.0},
	}
}

func cursorIDs(cmd *command) []int64 {
	arr, _ := cmd.body.Lookup("cursors").ArrayOK()
	values, _ := arr.Values()
	ids := make([]int64, 0, len(values))
	for _, v := range values {
		if id, ok := v.AsInt64OK(); ok {
			ids = append(ids, id)
		}
	}
	return ids
}
