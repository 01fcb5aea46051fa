package main

import (
	"encoding/binary"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FerretDB 1.24 on SQLite looks a document up by key only for a filter that is exactly
// {_id: v}, v a string or an ObjectId; any other filter, {_id: v, status: "running"} included,
// reads and decodes every document of the collection, once per statement of an update. A job
// queue fences its writes on the _id it read and on more fields (the run, the status), so on a
// collection of a few hundred tasks each such statement took 60-110 ms, and a batch of sixteen
// pings a second: where MongoDB serves the same write from the _id index.
//
// The front serves those writes by key. Under its lock, before it forwards an update or a
// findAndModify, it asks FerretDB, for each statement whose filter names one _id beside other
// conditions, whether the document of that _id matches the whole filter now: an aggregate whose
// first stage {$match: {_id: v}} FerretDB looks up by key, and whose second is the filter as
// given, which FerretDB judges with its own matcher. A statement whose document matches goes on
// with its filter narrowed to {_id: v}, which changes the same document. One whose document does
// not (a fence that failed: another worker won the claim, the run was taken over) goes on with
// the filter {_id: noMatchID}, looked up by key too, which matches nothing once the front has
// made sure, by key, that no document has that _id: FerretDB then parses and answers the
// statement as it would have, with nothing matched (only when that _id's document exists: a
// filter judged on no document might be one FerretDB would refuse). Statements that upsert, name
// a collation, a hint or array filters, or whose update is a pipeline, are forwarded as sent, and
// so are an update that names one _id twice and the statements after one that names no single
// _id: each statement is judged before any runs, which holds only while the statements before it
// change no other document.

// noMatchID is the _id that statements known to match nothing are narrowed to.
const noMatchID = "devserver: a fenced write that matches nothing (no document has this _id)"

// noMatchKey is noMatchID's idKey.
var noMatchKey = func() string {
	raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: noMatchID}})
	return idKey(bson.Raw(raw).Lookup("_id"))
}()

// keyedWriteMaxStatements bounds the statements of an update the front checks one by one: a
// check is a round trip to FerretDB, and past this many a scan per statement costs less than
// it saves.
const keyedWriteMaxStatements = 256

// maxBodySize is the largest command body a server takes (maxBsonObjectSize and the 16 KiB
// MongoDB allows a command beyond it).
const maxBodySize = 16<<20 + 16<<10

// How a write was keyed, for the lock report.
const (
	notKeyed   = ""
	keyedByID  = "by key"
	keyedFirst = "by key, found by a read" // see narrowing.first
)

// keyWrites returns req with the filters of its _id-fenced statements narrowed (see
// narrowing.filter), how (keyedByID, keyedFirst), and the documents the narrowing read whole,
// by idKey (see narrowing.images); or req itself and notKeyed, to send it as it is.
func (f *front) keyWrites(req []byte) ([]byte, string, map[string]bson.Raw) {
	name := peekCommandName(req)
	if name != "update" && name != "findAndModify" && name != "findandmodify" {
		return req, notKeyed, nil
	}
	cmd, ok := parseCommand(req)
	if !ok || cmd.flags&flagChecksumPresent != 0 {
		return req, notKeyed, nil
	}
	coll, ok := cmd.body.Lookup(name).StringValueOK()
	if !ok {
		return req, notKeyed, nil
	}
	n := &narrowing{f: f, db: cmd.db(), coll: coll, images: map[string]bson.Raw{}}
	var body bson.Raw
	how := keyedByID
	if name == "update" {
		body = n.keyUpdate(cmd)
	} else {
		body, how = n.keyFindAndModify(cmd)
	}
	if body == nil {
		return req, notKeyed, nil
	}
	return requestBytes(cmd, body), how, n.images
}

// keyUpdate returns the update's body with its statements keyed, or nil to send it as it is.
// Every statement is judged before any runs, which holds only while each statement that runs
// before a judged one changes no document but its own _id's: statements are judged up to the
// first that may change other documents (it names no one _id), and those after it go as sent.
func (n *narrowing) keyUpdate(cmd *command) bson.Raw {
	stmts, all := cmd.allDocuments("updates")
	if !all || len(stmts) == 0 || len(stmts) > keyedWriteMaxStatements {
		return nil
	}
	keyed := make(bson.A, len(stmts))
	for i, st := range stmts {
		keyed[i] = st
	}
	seen := map[string]bool{}
	changed := false
	for i, st := range stmts {
		id, ok := oneID(st.Lookup("q"))
		if !ok {
			break
		}
		if seen[idKey(id)] {
			return nil // judged on what an earlier statement had not changed yet
		}
		seen[idKey(id)] = true
		if _, narrow := keyableFilter(st.Lookup("q")); !narrow || truthy(st.Lookup("upsert")) ||
			hasAny(st, "collation", "hint", "arrayFilters") || st.Lookup("u").Type == bson.TypeArray {
			continue
		}
		to, ok := n.filter(id, st.Lookup("q"))
		if !ok {
			return nil
		}
		narrowed, err := withField(st, "q", to)
		if err != nil {
			return nil
		}
		keyed[i], changed = narrowed, true
	}
	if !changed {
		return nil
	}
	body, err := withField(cmd.body, "updates", keyed)
	if err != nil || len(body) > maxBodySize {
		return nil // statements sent as a document sequence may be more than a body holds
	}
	return body
}

// keyFindAndModify returns the command's body with its query keyed, or nil to send it as it is.
// A query that names no _id is keyed only where a change stream covers the collection: the
// streams read the document it changes before it runs (a scan), and the write itself would scan
// again; the front reads which document that is instead, and the write and the streams' read go
// by key.
func (n *narrowing) keyFindAndModify(cmd *command) (bson.Raw, string) {
	b := cmd.body
	if truthy(b.Lookup("upsert")) || hasAny(b, "collation", "hint", "arrayFilters") || b.Lookup("update").Type == bson.TypeArray {
		return nil, notKeyed
	}
	if q, err := b.LookupErr("query"); err == nil && q.Type != bson.TypeEmbeddedDocument {
		return nil, notKeyed // FerretDB refuses it
	}
	var to bson.D
	how := keyedByID
	if id, ok := keyableFilter(b.Lookup("query")); ok {
		to, ok = n.filter(id, b.Lookup("query"))
		if !ok {
			return nil, notKeyed
		}
	} else if n.f.streams.coversWrites(n.db, n.coll) {
		if to, ok = n.first(b.Lookup("query"), b.Lookup("sort")); !ok {
			return nil, notKeyed
		}
		how = keyedFirst
	} else {
		return nil, notKeyed
	}
	body, err := withField(b, "query", to)
	if err != nil {
		return nil, notKeyed
	}
	return body, how
}

// first returns the filter, looked up by key, of the first document filter matches now in the
// order of sort (if any; else FerretDB's order, in which it also updates): {_id: v}, or
// {_id: noMatchID} if none matches. False when the first document's _id cannot be looked up by
// key, or the read fails.
func (n *narrowing) first(filter, sort bson.RawValue) (bson.D, bool) {
	cmd := bson.D{{Key: "find", Value: n.coll}}
	if filter.Type == bson.TypeEmbeddedDocument {
		cmd = append(cmd, bson.E{Key: "filter", Value: filter})
	}
	if sort.Type == bson.TypeEmbeddedDocument {
		cmd = append(cmd, bson.E{Key: "sort", Value: sort})
	}
	cmd = append(cmd, bson.E{Key: "limit", Value: 1}, bson.E{Key: "batchSize", Value: 2})
	docs, err := n.f.reader.readAll(n.db, n.coll, cmd)
	if err != nil {
		return nil, false
	}
	if len(docs) == 0 {
		return n.nothing()
	}
	id := docs[0].Lookup("_id")
	if id.Type != bson.TypeString && id.Type != bson.TypeObjectID {
		return nil, false
	}
	n.images[idKey(id)] = docs[0]
	return bson.D{{Key: "_id", Value: id}}, true
}

// oneID returns the _id a filter names by value, a string or an ObjectId (the ones FerretDB
// looks up by key): a write of that filter changes that document or none.
func oneID(v bson.RawValue) (bson.RawValue, bool) {
	filter, ok := v.DocumentOK()
	if !ok {
		return bson.RawValue{}, false
	}
	id, err := filter.LookupErr("_id")
	if err != nil || (id.Type != bson.TypeString && id.Type != bson.TypeObjectID) {
		return bson.RawValue{}, false
	}
	return id, true
}

// keyableFilter returns the _id a filter names (see oneID) when the filter has other conditions
// besides; false otherwise (a filter of the _id alone is looked up by key already).
func keyableFilter(v bson.RawValue) (bson.RawValue, bool) {
	id, ok := oneID(v)
	if !ok {
		return bson.RawValue{}, false
	}
	elems, err := v.Document().Elements()
	if err != nil || len(elems) < 2 {
		return bson.RawValue{}, false
	}
	return id, true
}

// narrowing narrows the filters of one command's statements.
type narrowing struct {
	f        *front
	db, coll string
	unused   bool // noMatchID was found unused in db.coll, under this lock
	// images are the documents read whole to narrow the statements, by idKey, as they are under
	// this lock before the write (noMatchID's: nil, no such document): the change streams take
	// them as the write's before-images instead of reading them again.
	images map[string]bson.Raw
}

// filter returns the filter, looked up by key, that matches what filter matches now, given that
// filter names the _id id: {_id: id} if that document matches, else {_id: noMatchID}. False
// when a check fails, so that the write goes on as sent.
func (n *narrowing) filter(id, filter bson.RawValue) (bson.D, bool) {
	doc, ok := n.f.matchByKey(n.db, n.coll, id, filter)
	switch {
	case !ok:
		return nil, false
	case doc != nil:
		n.images[idKey(id)] = doc
		return bson.D{{Key: "_id", Value: id}}, true
	}
	// The filter was judged on that document and matched nothing. Were there no such document,
	// it was judged on none, and FerretDB, which judges it on every document it scans, might
	// find it invalid: such a write goes as sent.
	if docs, err := n.f.reader.find(n.db, n.coll, bson.D{{Key: "_id", Value: id}}, nil, 1); err != nil || len(docs) == 0 {
		return nil, false
	}
	return n.nothing()
}

// nothing returns the filter {_id: noMatchID}, once it made sure that no document has that _id.
func (n *narrowing) nothing() (bson.D, bool) {
	nothing := bson.D{{Key: "_id", Value: noMatchID}}
	if !n.unused {
		docs, err := n.f.reader.find(n.db, n.coll, nothing, nil, 1)
		if n.unused = err == nil && len(docs) == 0; !n.unused {
			return nil, false
		}
		n.images[noMatchKey] = nil
	}
	return nothing, true
}

// matchByKey returns the document of db.coll whose _id is id, whole, if it matches filter now,
// or nil; false for ok when the check fails.
func (f *front) matchByKey(db, coll string, id, filter bson.RawValue) (doc bson.Raw, ok bool) {
	pipeline := bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: "_id", Value: id}}}},
		bson.D{{Key: "$match", Value: filter}},
	}
	docs, err := f.reader.readAll(db, coll, bson.D{{Key: "aggregate", Value: coll}, {Key: "pipeline", Value: pipeline}, {Key: "cursor", Value: bson.D{}}})
	if err != nil || len(docs) > 1 {
		return nil, false
	}
	if len(docs) == 0 {
		return nil, true
	}
	return docs[0], true
}

// hasAny says doc has one of the fields.
func hasAny(doc bson.Raw, fields ...string) bool {
	for _, name := range fields {
		if _, err := doc.LookupErr(name); err == nil {
			return true
		}
	}
	return false
}

// withField returns doc with its field name set to v (appended if doc lacks it), the other
// fields as they were, in their order.
func withField(doc bson.Raw, name string, v any) (bson.Raw, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	out := make(bson.D, 0, len(elems)+1)
	set := false
	for _, e := range elems {
		if e.Key() == name {
			out, set = append(out, bson.E{Key: name, Value: v}), true
			continue
		}
		out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
	}
	if !set {
		out = append(out, bson.E{Key: name, Value: v})
	}
	return bson.Marshal(out)
}

// requestBytes encodes cmd again with body as its only section (its document sequences are in
// body now), keeping its request id and flags.
func requestBytes(cmd *command, body bson.Raw) []byte {
	msg := make([]byte, headerLen+4, headerLen+4+1+len(body))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(cmd.requestID))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	binary.LittleEndian.PutUint32(msg[headerLen:headerLen+4], cmd.flags)
	msg = append(msg, 0)
	msg = append(msg, body...)
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	return msg
}
