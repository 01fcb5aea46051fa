package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Operation types of the history. opLost and opGap are the front's own: opLost marks a write whose
// changes it could not read, so that a stream that reaches it fails as one whose history is lost
// instead of silently missing events; opGap marks where writes began to be recorded for a scope.
const (
	opInsert       = "insert"
	opUpdate       = "update"
	opReplace      = "replace"
	opDelete       = "delete"
	opDrop         = "drop"
	opDropDatabase = "dropDatabase"
	opInvalidate   = "invalidate"
	opLost         = "lost"
	opGap          = "gap" // where a span of recorded writes began; no stream delivers it
)

// change is one change as the history keeps it: what each stream needs to build its own event.
type change struct {
	seq         uint64
	op          string
	db, coll    string // coll is empty for dropDatabase (and for a lost write to a whole database)
	clusterTime bson.Timestamp
	wallTime    time.Time

	id            bson.RawValue // the document's _id, for document changes
	before, after bson.Raw      // the document before and after the write, where there is one
	update        bson.Raw      // updateDescription, for updates
	reason        string        // why the write could not be read, for opLost
}

// history keeps the latest changes, in the order of the writes, in a ring of a fixed size.
type history struct {
	epoch uint64 // this process's history: a token of another one cannot be resumed

	mu        sync.Mutex
	ring      []*change
	start, n  int
	lastSeq   uint64         // of the newest change ever recorded, 0 before the first
	lastTime  bson.Timestamp // of the newest change, or of the start
	lostTime  bson.Timestamp // of the newest change evicted from the ring, zero if none was
	changed   chan struct{}  // closed and replaced at every append: what waiting getMores wait on
	timestamp func() time.Time
}

func newHistory(size int) *history {
	var b [8]byte
	_, _ = rand.Read(b[:])
	h := &history{
		epoch:     binary.BigEndian.Uint64(b[:]),
		ring:      make([]*change, max(size, 1)),
		changed:   make(chan struct{}),
		timestamp: time.Now,
	}
	h.lastTime = h.tick(h.timestamp())
	return h
}

// tick is the cluster time after lastTime at wall time now: seconds, and a counter within one.
func (h *history) tick(now time.Time) bson.Timestamp {
	t := uint32(now.Unix())
	if t <= h.lastTime.T {
		return bson.Timestamp{T: h.lastTime.T, I: h.lastTime.I + 1}
	}
	return bson.Timestamp{T: t, I: 1}
}

// append records changes, numbering and timing them, and wakes the waiting streams.
func (h *history) append(changes []*change) {
	if len(changes) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.timestamp()
	for _, c := range changes {
		h.lastSeq++
		h.lastTime = h.tick(now)
		c.seq, c.clusterTime, c.wallTime = h.lastSeq, h.lastTime, now
		if h.n == len(h.ring) {
			h.lostTime = h.ring[h.start].clusterTime
			h.ring[h.start] = nil
			h.start = (h.start + 1) % len(h.ring)
			h.n--
		}
		h.ring[(h.start+h.n)%len(h.ring)] = c
		h.n++
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// position is the sequence number and cluster time of the newest change.
func (h *history) position() (uint64, bson.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastSeq, h.lastTime
}

// since returns the changes after seq pos, and a channel closed at the next append. ok is false
// when changes after pos have already left the ring.
func (h *history) since(pos uint64) (changes []*change, changed <-chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.lastSeq - uint64(h.n) + 1 // the oldest change kept
	if pos+1 < first {
		return nil, h.changed, false
	}
	for i := int(pos + 1 - first); i < h.n; i++ {
		changes = append(changes, h.ring[(h.start+i)%len(h.ring)])
	}
	return changes, h.changed, true
}

// before returns the position just before the first change at or after cluster time t. ok is
// false when changes at or after t have already left the ring.
func (h *history) before(t bson.Timestamp) (pos uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.lostTime.IsZero() && !h.lostTime.Before(t) {
		return 0, false
	}
	pos = h.lastSeq - uint64(h.n)
	for i := range h.n {
		c := h.ring[(h.start+i)%len(h.ring)]
		if !c.clusterTime.Before(t) {
			break
		}
		pos = c.seq
	}
	return pos, true
}

// kept says whether changes after pos are all still in the ring.
func (h *history) kept(pos uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return pos+1 >= h.lastSeq-uint64(h.n)+1 && pos <= h.lastSeq
}

// A resume token is {_data: hex}, as MongoDB's are: the history's epoch, the position of the
// change (or of the stream, for a postBatchResumeToken), and whether it is an invalidate.
type token struct {
	epoch      uint64
	seq        uint64
	invalidate bool
}

func (t token) doc() bson.Raw {
	flag := 0
	if t.invalidate {
		flag = 1
	}
	raw, _ := bson.Marshal(bson.D{{Key: "_data", Value: fmt.Sprintf("%016x%016x%02x", t.epoch, t.seq, flag)}})
	return raw
}

func parseToken(v bson.RawValue) (token, error) {
	doc, ok := v.DocumentOK()
	if !ok {
		return token{}, newCommandError(codeInvalidResumeToken, "a resume token must be a document, not %s", v.Type)
	}
	data, _ := doc.Lookup("_data").StringValueOK()
	b, err := hex.DecodeString(data)
	if err != nil || len(b) != 17 || b[16] > 1 {
		return token{}, newCommandError(codeInvalidResumeToken, "%v is not a resume token of this server", doc)
	}
	return token{
		epoch:      binary.BigEndian.Uint64(b[:8]),
		seq:        binary.BigEndian.Uint64(b[8:16]),
		invalidate: b[16] == 1,
	}, nil
}
