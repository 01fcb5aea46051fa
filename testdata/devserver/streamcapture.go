package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A write that a stream covers is read around: while the front holds its lock, it reads through
// its own backend connection the documents the write may change, forwards the write, then reads
// them again by _id. Comparing the two gives the events. Writes no stream covers cost nothing.

// capture reads what one kind of write changed.
type capture interface {
	// before reads what the write may change, before it runs.
	before(b *backendClient) error
	// after reads what the write changed, given its reply, and returns the changes.
	after(b *backendClient, reply bson.Raw) ([]*change, error)
}

// pendingWrite is a covered write on its way to the backend.
type pendingWrite struct {
	capture
	db, coll  string
	beforeErr error
}

// know gives the write documents read whole under this lock just before it, by idKey (nil: no
// document has that _id), so that its capture does not read them again.
func (w *pendingWrite) know(images map[string]bson.Raw) {
	if k, ok := w.capture.(interface{ know(map[string]bson.Raw) }); ok && len(images) > 0 {
		k.know(images)
	}
}

// watch returns the covered write that req is, or nil: for any other message, and for every
// message while no stream is open, it does nothing but load a counter.
func (s *streams) watch(req []byte) *pendingWrite {
	if s == nil || s.active.Load() == 0 {
		return nil
	}
	name := peekCommandName(req)
	if !oneOf(name, "insert", "update", "delete", "findAndModify", "findandmodify", "drop", "dropDatabase") {
		return nil
	}
	cmd, ok := parseCommand(req)
	if !ok {
		return nil
	}
	w := &pendingWrite{db: cmd.db()}
	if name != "dropDatabase" {
		if w.coll, _ = cmd.body.Lookup(name).StringValueOK(); w.coll == "" {
			return nil
		}
	}
	if !s.covered(w.db, w.coll) {
		return nil
	}
	switch name {
	case "insert":
		w.capture = &insertCapture{cmd: cmd, db: w.db, coll: w.coll}
	case "update":
		w.capture = &updateCapture{docCapture: newDocCapture(w.db, w.coll), stmts: cmd.documents("updates")}
	case "delete":
		w.capture = &deleteCapture{docCapture: newDocCapture(w.db, w.coll), stmts: cmd.documents("deletes")}
	case "drop":
		w.capture = &dropCapture{db: w.db, coll: w.coll}
	case "dropDatabase":
		w.capture = &dropDatabaseCapture{db: w.db}
	default:
		w.capture = &findAndModifyCapture{docCapture: newDocCapture(w.db, w.coll), cmd: cmd.body}
	}
	return w
}

// record reads what w changed after the backend answered it, and appends the changes to the
// history. A read that failed leaves a lost mark instead, which fails the streams that reach it.
func (s *streams) record(w *pendingWrite, reply []byte, b *backendClient) {
	err := w.beforeErr
	var changes []*change
	if err == nil {
		var body bson.Raw
		if body, err = replyBody(reply); err == nil {
			changes, err = w.after(b, body)
		}
	}
	if err != nil {
		s.logger.Warn("front: a write that a change stream watches could not be read; its streams will fail",
			slog.String("ns", w.db+"."+w.coll), slog.Any("error", err))
		changes = []*change{{op: opLost, db: w.db, coll: w.coll, reason: err.Error()}}
	}
	s.hist.append(changes)
}

type insertCapture struct {
	cmd      *command
	db, coll string
}

func (c *insertCapture) before(*backendClient) error { return nil }

// after takes the documents sent, but those the reply names as failed, and after the first
// failure of an ordered insert, none.
func (c *insertCapture) after(_ *backendClient, reply bson.Raw) ([]*change, error) {
	if replyError(reply) != nil {
		return nil, nil
	}
	failed := writeErrorIndexes(reply)
	ordered := true
	if v, err := c.cmd.body.LookupErr("ordered"); err == nil {
		ordered = truthy(v)
	}
	stop := math.MaxInt // an ordered insert stops at its first failure
	if ordered && len(failed) > 0 {
		stop = slices.Min(mapKeys(failed))
	}
	var changes []*change
	for i, d := range c.cmd.documents("documents") {
		if failed[i] || i > stop {
			continue
		}
		changes = append(changes, &change{op: opInsert, db: c.db, coll: c.coll, id: d.Lookup("_id"), after: d})
	}
	return changes, nil
}

func writeErrorIndexes(reply bson.Raw) map[int]bool {
	failed := map[int]bool{}
	arr, _ := reply.Lookup("writeErrors").ArrayOK()
	values, _ := arr.Values()
	for _, v := range values {
		if d, ok := v.DocumentOK(); ok {
			if i, ok := d.Lookup("index").AsInt64OK(); ok {
				failed[int(i)] = true
			}
		}
	}
	return failed
}

func mapKeys(m map[int]bool) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// docCapture keeps the documents a write may change, by _id, in the order first met.
type docCapture struct {
	db, coll string
	ids      []bson.RawValue
	images   map[string]bson.Raw // before the write
	replaces map[string]bool     // changed by a replacement rather than by update operators
	known    map[string]bson.Raw // read just before, under the same lock (see pendingWrite.know)
}

func (c *docCapture) know(images map[string]bson.Raw) { c.known = images }

func newDocCapture(db, coll string) docCapture {
	return docCapture{db: db, coll: coll, images: map[string]bson.Raw{}, replaces: map[string]bool{}}
}

// read finds the documents a statement may change and keeps those not met yet.
func (c *docCapture) read(b *backendClient, filter, sort any, limit int64, replace bool) error {
	if d, ok := filter.(bson.D); ok && len(d) == 1 && d[0].Key == "_id" {
		if id, ok := d[0].Value.(bson.RawValue); ok {
			if image, known := c.known[idKey(id)]; known {
				if image != nil {
					c.keep(id, image, replace)
				}
				return nil
			}
		}
	}
	docs, err := b.find(c.db, c.coll, filter, sort, limit)
	if err != nil {
		return err
	}
	for _, d := range docs {
		c.keep(d.Lookup("_id"), d, replace)
	}
	return nil
}

func (c *docCapture) keep(id bson.RawValue, image bson.Raw, replace bool) {
	k := idKey(id)
	if _, seen := c.images[k]; seen {
		return
	}
	c.ids = append(c.ids, id)
	c.images[k], c.replaces[k] = image, replace
}

// changes reads the kept documents again and returns how each changed: inserted (upserted),
// replaced, updated, or not at all (then no change).
func (c *docCapture) changes(b *backendClient) ([]*change, error) {
	now, err := b.byIDs(c.db, c.coll, c.ids)
	if err != nil {
		return nil, err
	}
	var changes []*change
	for _, id := range c.ids {
		k := idKey(id)
		before, after := c.images[k], now[k]
		ch := &change{db: c.db, coll: c.coll, id: id, before: before, after: after}
		switch {
		case after == nil:
			continue // not there before nor after, or gone: an update removes nothing
		case before == nil:
			ch.op, ch.before = opInsert, nil
		case bytes.Equal(before, after):
			continue
		case c.replaces[k]:
			ch.op = opReplace
		default:
			ch.op, ch.update = opUpdate, updateDescription(before, after)
		}
		changes = append(changes, ch)
	}
	return changes, nil
}

// isReplacement says whether an update is a replacement document rather than operators or a
// pipeline.
func isReplacement(u bson.RawValue) bool {
	return u.Type == bson.TypeEmbeddedDocument && !isOperatorDocument(u)
}

type updateCapture struct {
	docCapture
	stmts []bson.Raw
}

func (c *updateCapture) before(b *backendClient) error {
	for _, st := range c.stmts {
		limit := int64(1)
		if truthy(st.Lookup("multi")) {
			limit = 0
		}
		if err := c.read(b, filterOf(st.Lookup("q")), nil, limit, isReplacement(st.Lookup("u"))); err != nil {
			return err
		}
	}
	return nil
}

func (c *updateCapture) after(b *backendClient, reply bson.Raw) ([]*change, error) {
	arr, _ := reply.Lookup("upserted").ArrayOK()
	upserts, _ := arr.Values()
	for _, u := range upserts {
		d, _ := u.DocumentOK()
		c.keep(d.Lookup("_id"), nil, false)
	}
	changes, err := c.changes(b)
	if err != nil {
		return nil, err
	}
	// A statement changes the first document that matches; so does the read before it. Check it.
	if n, ok := reply.Lookup("nModified").AsInt64OK(); ok && len(c.stmts) == 1 && int(n) != len(changes)-len(upserts) {
		return nil, fmt.Errorf("the update modified %d documents, the reads around it found %d", n, len(changes)-len(upserts))
	}
	return changes, nil
}

// filterOf is what to read for a statement's filter; none means every document. A filter that
// names one _id (and maybe more conditions) can change that document at most, so it is read by
// _id alone, which FerretDB looks up by key where it scans for any other filter; if the other
// conditions do not match, the read after finds it unchanged and there is no event.
func filterOf(v bson.RawValue) any {
	d, ok := v.DocumentOK()
	if !ok {
		return bson.D{}
	}
	if id, err := d.LookupErr("_id"); err == nil && !isOperatorDocument(id) && id.Type != bson.TypeRegex && id.Type != bson.TypeArray {
		return bson.D{{Key: "_id", Value: id}}
	}
	return d
}

type deleteCapture struct {
	docCapture
	stmts []bson.Raw
}

func (c *deleteCapture) before(b *backendClient) error {
	for _, st := range c.stmts {
		limit, _ := st.Lookup("limit").AsInt64OK()
		if err := c.read(b, filterOf(st.Lookup("q")), nil, limit, false); err != nil {
			return err
		}
	}
	return nil
}

func (c *deleteCapture) after(b *backendClient, reply bson.Raw) ([]*change, error) {
	gone := c.ids
	if n, _ := reply.Lookup("n").AsInt64OK(); int(n) != len(c.ids) {
		now, err := b.byIDs(c.db, c.coll, c.ids)
		if err != nil {
			return nil, err
		}
		gone = slices.DeleteFunc(slices.Clone(c.ids), func(id bson.RawValue) bool { return now[idKey(id)] != nil })
	}
	changes := make([]*change, 0, len(gone))
	for _, id := range gone {
		changes = append(changes, &change{op: opDelete, db: c.db, coll: c.coll, id: id, before: c.images[idKey(id)]})
	}
	return changes, nil
}

type findAndModifyCapture struct {
	docCapture
	cmd bson.Raw
}

func (c *findAndModifyCapture) before(b *backendClient) error {
	var sort any
	if d, ok := c.cmd.Lookup("sort").DocumentOK(); ok {
		sort = d
	}
	return c.read(b, filterOf(c.cmd.Lookup("query")), sort, 1, isReplacement(c.cmd.Lookup("update")))
}

func (c *findAndModifyCapture) after(b *backendClient, reply bson.Raw) ([]*change, error) {
	if truthy(c.cmd.Lookup("remove")) {
		if n, _ := reply.Lookup("lastErrorObject", "n").AsInt64OK(); n == 0 || len(c.ids) == 0 {
			return nil, nil
		}
		return []*change{{op: opDelete, db: c.db, coll: c.coll, id: c.ids[0], before: c.images[idKey(c.ids[0])]}}, nil
	}
	if id, err := reply.LookupErr("lastErrorObject", "upserted"); err == nil {
		c.keep(id, nil, false)
	}
	return c.changes(b)
}

type dropCapture struct {
	db, coll string
	existed  bool
}

func (c *dropCapture) before(b *backendClient) error {
	names, err := b.collectionNames(c.db)
	c.existed = slices.Contains(names, c.coll)
	return err
}

func (c *dropCapture) after(_ *backendClient, reply bson.Raw) ([]*change, error) {
	if !c.existed || replyError(reply) != nil {
		return nil, nil
	}
	return []*change{{op: opDrop, db: c.db, coll: c.coll}}, nil
}

// dropDatabaseCapture gives a drop for each collection, then a dropDatabase, as MongoDB does.
type dropDatabaseCapture struct {
	db    string
	colls []string
}

func (c *dropDatabaseCapture) before(b *backendClient) error {
	var err error
	c.colls, err = b.collectionNames(c.db)
	slices.Sort(c.colls)
	return err
}

func (c *dropDatabaseCapture) after(_ *backendClient, reply bson.Raw) ([]*change, error) {
	if replyError(reply) != nil {
		return nil, nil
	}
	changes := make([]*change, 0, len(c.colls)+1)
	for _, coll := range c.colls {
		changes = append(changes, &change{op: opDrop, db: c.db, coll: coll})
	}
	return append(changes, &change{op: opDropDatabase, db: c.db}), nil
}
