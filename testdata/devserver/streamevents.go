package main

import (
	"bytes"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// eventOptions are the $changeStream options that shape each event.
type eventOptions struct {
	fullDocument             string // default, updateLookup, whenAvailable or required
	fullDocumentBeforeChange string // off, whenAvailable or required
}

// eventDoc builds the change event that a stream with opts delivers for c, with MongoDB's fields
// in MongoDB's order; epoch is the history's, for the resume token.
func eventDoc(c *change, epoch uint64, opts eventOptions, invalidate bool) bson.Raw {
	tok := token{epoch: epoch, seq: c.seq, invalidate: invalidate}
	doc := bson.D{{Key: "_id", Value: tok}}
	if invalidate {
		doc = append(doc,
			bson.E{Key: "operationType", Value: opInvalidate},
			bson.E{Key: "clusterTime", Value: c.clusterTime},
			bson.E{Key: "wallTime", Value: bson.NewDateTimeFromTime(c.wallTime)})
		return mustMarshal(doc)
	}
	doc = append(doc,
		bson.E{Key: "operationType", Value: c.op},
		bson.E{Key: "clusterTime", Value: c.clusterTime},
		bson.E{Key: "wallTime", Value: bson.NewDateTimeFromTime(c.wallTime)})
	if full := fullDocument(c, opts); full != nil {
		doc = append(doc, bson.E{Key: "fullDocument", Value: full})
	}
	ns := bson.D{{Key: "db", Value: c.db}}
	if c.coll != "" {
		ns = append(ns, bson.E{Key: "coll", Value: c.coll})
	}
	doc = append(doc, bson.E{Key: "ns", Value: ns})
	if c.id.Type != 0 {
		doc = append(doc, bson.E{Key: "documentKey", Value: bson.D{{Key: "_id", Value: c.id}}})
	}
	if c.update != nil {
		doc = append(doc, bson.E{Key: "updateDescription", Value: c.update})
	}
	if c.before != nil && opts.fullDocumentBeforeChange != "off" && opts.fullDocumentBeforeChange != "" {
		doc = append(doc, bson.E{Key: "fullDocumentBeforeChange", Value: c.before})
	}
	return mustMarshal(doc)
}

// fullDocument is the event's fullDocument: the new document of an insert or replace, and of an
// update when the stream asked for it. MongoDB's updateLookup reads the document when the event
// is delivered; here it is the document as the update left it.
func fullDocument(c *change, opts eventOptions) bson.Raw {
	switch c.op {
	case opInsert, opReplace:
		return c.after
	case opUpdate:
		if opts.fullDocument != "" && opts.fullDocument != "default" {
			return c.after
		}
	}
	return nil
}

// MarshalBSONValue lets a token stand for its document in a bson.D.
func (t token) MarshalBSONValue() (byte, []byte, error) {
	return byte(bson.TypeEmbeddedDocument), t.doc(), nil
}

func mustMarshal(doc bson.D) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		panic(err) // every value put in an event is plain BSON
	}
	return raw
}

// updateDescription describes how an update changed before into after: the fields set (a
// sub-document that both have is compared field by field, and its changed fields named by their
// dotted path; an array that changed is given whole) and the fields removed.
func updateDescription(before, after bson.Raw) bson.Raw {
	var updated bson.D
	removed := bson.A{}
	diff("", before, after, &updated, &removed)
	if updated == nil {
		updated = bson.D{}
	}
	return mustMarshal(bson.D{
		{Key: "updatedFields", Value: updated},
		{Key: "removedFields", Value: removed},
		{Key: "truncatedArrays", Value: bson.A{}},
	})
}

func diff(prefix string, before, after bson.Raw, updated *bson.D, removed *bson.A) {
	afterElems, _ := after.Elements()
	for _, e := range afterElems {
		key, av := e.Key(), e.Value()
		bv, err := before.LookupErr(key)
		switch {
		case err != nil:
			*updated = append(*updated, bson.E{Key: prefix + key, Value: av})
		case bv.Type == av.Type && bytes.Equal(bv.Value, av.Value):
		case isNonEmptyDocument(bv) && isNonEmptyDocument(av):
			diff(prefix+key+".", bv.Document(), av.Document(), updated, removed)
		default:
			*updated = append(*updated, bson.E{Key: prefix + key, Value: av})
		}
	}
	beforeElems, _ := before.Elements()
	for _, e := range beforeElems {
		if _, err := after.LookupErr(e.Key()); err != nil {
			*removed = append(*removed, prefix+e.Key())
		}
	}
}

func isNonEmptyDocument(v bson.RawValue) bool {
	d, ok := v.DocumentOK()
	return ok && len(d) > 5
}
