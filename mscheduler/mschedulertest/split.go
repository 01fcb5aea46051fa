package mschedulertest

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MongoDB applies the statements of one write command (an update of a
// batch claim, a batch of run ends) one by one, and other clients' writes
// may land between them; the development server runs each command whole.
// A HoldProxy that splits sends each statement as a command of its own,
// so that other commands, and its holds, come between them, then answers
// the client as the server would have answered the whole command.

// statementsField names the statements of each write command.
var statementsField = map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}

// splitWrite returns the bodies of one command per statement of m, or nil
// when m is not an update of more than one statement (a batch claim,
// batched run ends or pings: the writes whose fences other writes meet). Each keeps
// the command's other fields but txnNumber: a retryable write's statement
// ids would make a server take the second command for a retry of the
// first, so split statements are sent as plain writes.
func splitWrite(m *opMsg) [][]byte {
	name := firstKey(m.body)
	field, ok := statementsField[name]
	if !ok || name != "update" {
		return nil // inserts and deletes pass whole: no fence of a write reads them
	}
	stmts := statementsOf(m)
	if len(stmts) < 2 || len(m.sequences) > 1 || len(m.sequences) == 1 && m.sequences[field] == nil {
		return nil
	}
	elems, err := m.body.Elements()
	if err != nil {
		return nil
	}
	out := make([][]byte, len(stmts))
	for i, stmt := range stmts {
		var body bson.D
		for _, e := range elems {
			if k := e.Key(); k != field && k != "txnNumber" {
				body = append(body, bson.E{Key: k, Value: e.Value()})
			}
		}
		body = append(body, bson.E{Key: field, Value: bson.A{stmt}})
		b, err := bson.Marshal(body)
		if err != nil {
			return nil
		}
		out[i] = b
	}
	return out
}

// statementsOf is the statements of a write command, from its document
// sequence or its body; nil for another command.
func statementsOf(m *opMsg) []bson.Raw {
	field, ok := statementsField[firstKey(m.body)]
	if !ok {
		return nil
	}
	if docs := m.sequences[field]; docs != nil {
		return docs
	}
	arr, ok := m.body.Lookup(field).ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	var out []bson.Raw
	for _, v := range vals {
		if doc, ok := v.DocumentOK(); ok {
			out = append(out, doc)
		}
	}
	return out
}

// ordered says whether a write command stops at its first failed
// statement (the default).
func ordered(body bson.Raw) bool {
	b, ok := body.Lookup("ordered").BooleanOK()
	return !ok || b
}

// writeReply adds up the replies to the statements of one write command,
// as the server answers the whole command. A statement whose command
// failed as a whole (ok 0) ends it, with that reply.
type writeReply struct {
	n, nModified int32
	modified     bool // some statement's reply had nModified
	upserted     bson.A
	writeErrors  bson.A
	wcError      bson.Raw
	failed       bson.Raw // a statement's reply with ok 0
}

// add counts the reply of statement i. It reports whether the command
// goes on to its next statement.
func (w *writeReply) add(i int, reply bson.Raw, ordered bool) bool {
	if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok != 1 {
		w.failed = reply
		return false
	}
	n, _ := reply.Lookup("n").AsInt64OK()
	w.n += int32(n)
	if v := reply.Lookup("nModified"); v.Type != 0 {
		m, _ := v.AsInt64OK()
		w.nModified += int32(m)
		w.modified = true
	}
	w.upserted = append(w.upserted, reindexed(reply.Lookup("upserted"), i)...)
	errs := reindexed(reply.Lookup("writeErrors"), i)
	w.writeErrors = append(w.writeErrors, errs...)
	if wce, ok := reply.Lookup("writeConcernError").DocumentOK(); ok {
		w.wcError = wce
	}
	return len(errs) == 0 || !ordered
}

// reindexed is a reply's array of per-statement documents (upserted,
// writeErrors) with their index set to i.
func reindexed(v bson.RawValue, i int) bson.A {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	var out bson.A
	for _, v := range vals {
		doc, ok := v.DocumentOK()
		if !ok {
			continue
		}
		elems, _ := doc.Elements()
		d := bson.D{{Key: "index", Value: int32(i)}}
		for _, e := range elems {
			if e.Key() != "index" {
				d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
			}
		}
		out = append(out, d)
	}
	return out
}

// body is the whole command's reply.
func (w *writeReply) body() ([]byte, error) {
	if w.failed != nil {
		return w.failed, nil
	}
	d := bson.D{{Key: "n", Value: w.n}}
	if w.modified {
		d = append(d, bson.E{Key: "nModified", Value: w.nModified})
	}
	if len(w.upserted) > 0 {
		d = append(d, bson.E{Key: "upserted", Value: w.upserted})
	}
	if len(w.writeErrors) > 0 {
		d = append(d, bson.E{Key: "writeErrors", Value: w.writeErrors})
	}
	if w.wcError != nil {
		d = append(d, bson.E{Key: "writeConcernError", Value: w.wcError})
	}
	d = append(d, bson.E{Key: "ok", Value: 1.0})
	return bson.Marshal(d)
}

// firstKey is the name of a command: its body's first key.
func firstKey(body bson.Raw) string {
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// collectionOf is the collection a command names: the string value of its
// first element (find, update, aggregate, ...), or "".
func collectionOf(body bson.Raw) string {
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	s, _ := elems[0].Value().StringValueOK()
	return s
}

func statementErr(i int, err error) error { return fmt.Errorf("statement %d: %w", i, err) }
