package main

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// firstBatchDefault is the size of an aggregate's first batch when the command does not say.
const firstBatchDefault = 101

// isChangeStream says whether an aggregate's first stage is $changeStream.
func isChangeStream(cmd *command) bool {
	arr, ok := cmd.body.Lookup("pipeline").ArrayOK()
	if !ok {
		return false
	}
	first, err := arr.IndexErr(0)
	if err != nil {
		return false
	}
	doc, ok := first.DocumentOK()
	if !ok {
		return false
	}
	_, err = doc.LookupErr("$changeStream")
	return err == nil
}

// streamRequest is an aggregate that opens a change stream, decoded.
type streamRequest struct {
	scope     scope
	ns        string
	opts      eventOptions
	pipe      pipeline
	firstSize int

	resume      bson.RawValue // resumeAfter or startAfter
	startAfter  bool
	startAtTime bson.Timestamp
}

func parseStreamRequest(cmd *command) (*streamRequest, error) {
	r := &streamRequest{firstSize: firstBatchDefault, opts: eventOptions{fullDocument: "default", fullDocumentBeforeChange: "off"}}
	db := cmd.db()
	arr, _ := cmd.body.Lookup("pipeline").ArrayOK()
	values, _ := arr.Values()
	options := values[0].Document().Lookup("$changeStream")
	optDoc, ok := options.DocumentOK()
	if !ok {
		return nil, newCommandError(codeFailedToParse, "the $changeStream stage takes a document")
	}
	allClusters, err := r.parseOptions(optDoc)
	if err != nil {
		return nil, err
	}
	if err := r.setScope(db, cmd.body.Lookup("aggregate"), allClusters); err != nil {
		return nil, err
	}
	var stages []bson.Raw
	for _, v := range values[1:] {
		d, ok := v.DocumentOK()
		if !ok {
			return nil, newCommandError(codeFailedToParse, "each pipeline stage must be a document")
		}
		stages = append(stages, d)
	}
	if r.pipe, err = compilePipeline(stages); err != nil {
		return nil, err
	}
	if n, ok := cmd.body.Lookup("cursor", "batchSize").AsInt64OK(); ok && n >= 0 {
		r.firstSize = int(n)
	}
	return r, nil
}

// parseOptions reads the $changeStream stage's options; it returns allChangesForCluster.
func (r *streamRequest) parseOptions(doc bson.Raw) (bool, error) {
	elems, _ := doc.Elements()
	allClusters := false
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case "fullDocument":
			r.opts.fullDocument, _ = v.StringValueOK()
			if !oneOf(r.opts.fullDocument, "default", "updateLookup", "whenAvailable", "required") {
				return false, newCommandError(codeBadValue, "unknown fullDocument option %s", v)
			}
		case "fullDocumentBeforeChange":
			r.opts.fullDocumentBeforeChange, _ = v.StringValueOK()
			if !oneOf(r.opts.fullDocumentBeforeChange, "off", "whenAvailable", "required") {
				return false, newCommandError(codeBadValue, "unknown fullDocumentBeforeChange option %s", v)
			}
		case "resumeAfter", "startAfter":
			if r.resume.Type != 0 {
				return false, newCommandError(codeBadValue, "only one of resumeAfter, startAfter and startAtOperationTime may be given")
			}
			r.resume, r.startAfter = v, e.Key() == "startAfter"
		case "startAtOperationTime":
			t, i, ok := v.TimestampOK()
			if !ok {
				return false, newCommandError(codeBadValue, "startAtOperationTime must be a timestamp")
			}
			r.startAtTime = bson.Timestamp{T: t, I: i}
		case "allChangesForCluster":
			allClusters = truthy(v)
		case "showExpandedEvents":
			// Accepted; the expanded events (create, createIndexes, ...) are never emitted.
		default:
			return false, newCommandError(codeFailedToParse, "unknown $changeStream option %s", e.Key())
		}
	}
	if r.resume.Type != 0 && !r.startAtTime.IsZero() {
		return false, newCommandError(codeBadValue, "only one of resumeAfter, startAfter and startAtOperationTime may be given")
	}
	return allClusters, nil
}

func (r *streamRequest) setScope(db string, target bson.RawValue, allClusters bool) error {
	if coll, ok := target.StringValueOK(); ok {
		if allClusters {
			return newCommandError(codeBadValue, "allChangesForCluster needs aggregate: 1 on the admin database")
		}
		r.scope, r.ns = scope{db: db, coll: coll}, db+"."+coll
		return nil
	}
	if n, ok := target.AsInt64OK(); !ok || n != 1 {
		return newCommandError(codeFailedToParse, "aggregate must name a collection, or be 1")
	}
	r.ns = db + ".$cmd.aggregate"
	switch {
	case allClusters && db == "admin":
		r.scope = scope{cluster: true}
	case allClusters:
		return newCommandError(codeBadValue, "allChangesForCluster needs aggregate: 1 on the admin database")
	case db == "admin":
		return newCommandError(codeBadValue, "a change stream on the admin database needs allChangesForCluster")
	default:
		r.scope = scope{db: db}
	}
	return nil
}

func oneOf(s string, options ...string) bool {
	for _, o := range options {
		if s == o {
			return true
		}
	}
	return false
}

// open opens a change stream and answers with its first batch: the events already there when
// it resumes, none for a new stream.
func (s *streams) open(cmd *command) (bson.D, error) {
	r, err := parseStreamRequest(cmd)
	if err != nil {
		return nil, err
	}
	st, err := s.register(r)
	if err != nil {
		return nil, err
	}
	st.busy.Lock()
	defer st.busy.Unlock()
	docs, _, err := st.next(s.hist, r.firstSize)
	if err != nil {
		s.close(st.id)
		return nil, err
	}
	return s.batchReply(st, "firstBatch", docs), nil
}

// register creates the cursor at the position the request starts from, under the front's lock
// so that no write is half read: every write after that position is in the history.
func (s *streams) register(r *streamRequest) (*stream, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()

	pos, err := s.startLocked(r)
	if err != nil {
		return nil, err
	}
	s.attachLocked(r.scope)
	s.lastID++
	st := &stream{
		id: s.lastID, scope: r.scope, ns: r.ns, opts: r.opts, pipe: r.pipe, epoch: s.hist.epoch,
		killed: make(chan struct{}), pos: pos,
	}
	st.touch()
	s.cursors[st.id] = st
	return st, nil
}

// startLocked is the history position a stream starts after; s.mu is held.
func (s *streams) startLocked(r *streamRequest) (uint64, error) {
	last, lastTime := s.hist.position()
	switch {
	case r.resume.Type != 0:
		t, err := parseToken(r.resume)
		if err != nil {
			return 0, err
		}
		switch {
		case t.epoch != s.hist.epoch:
			return 0, historyLost("the token is from another run of the development server")
		case t.invalidate && !r.startAfter:
			return 0, newCommandError(codeInvalidResumeToken, "cannot resume after an invalidate event; use startAfter")
		case t.seq > last:
			return 0, newCommandError(codeInvalidResumeToken, "the resume token is ahead of the history")
		case !s.hist.kept(t.seq):
			return 0, historyLost("the token is older than the history's %d changes", len(s.hist.ring))
		case !s.coveredSinceLocked(r.scope, t.seq, bson.Timestamp{}):
			return 0, historyLost("no stream watched %s for a while after the token, so its writes were not kept", r.ns)
		}
		return t.seq, nil

	case !r.startAtTime.IsZero():
		pos, ok := s.hist.before(r.startAtTime)
		if !ok {
			return 0, historyLost("changes at that time have left the history's %d changes", len(s.hist.ring))
		}
		if !lastTime.Before(r.startAtTime) && !s.coveredSinceLocked(r.scope, 0, r.startAtTime) {
			return 0, historyLost("no stream watched %s at that time, so its writes were not kept", r.ns)
		}
		return pos, nil
	}
	return last, nil
}
