package mscheduler_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Regression cases of bugs the vandal soak found.

// TestInvalidByHandGetsItsReason: a task set to status invalid by hand,
// with no note saying why (or a note edited into a number), was never
// looked at again: no reason anywhere for a person to find. The check
// writes the note, naming the status.
func TestInvalidByHandGetsItsReason(t *testing.T) {
	for name, edit := range map[string]bson.D{
		"no note":       {{Key: "status", Value: "invalid"}},
		"a broken note": {{Key: "status", Value: "invalid"}, {Key: "invalid", Value: 7}},
	} {
		t.Run(name, func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"})
			setFields(t, coll, "k", edit)
			c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
			scnMetaWaitLeader(t, coll, c)
			field := "status"
			if name == "a broken note" {
				field = "invalid"
			}
			// The task is invalid from the start: wait for the note. Read
			// raw: until the check writes it, the broken note (a number)
			// does not decode into one.
			var last bson.Raw
			var got string
			if !scnMetaPoll(scnMetaWait, func() bool {
				last, _ = coll.FindOne(ctxT(t), bson.D{{Key: "_id", Value: "k"}}).Raw()
				got, _ = last.Lookup("invalid", "field").StringValueOK()
				return got != ""
			}) || got != field {
				t.Fatalf("task %q: %s, want invalid.field %q", "k", last, field)
			}
		})
	}
}

// TestRunAtWrittenAsTextIsNamed: a run_at written as a date in a string
// (or as a number) decodes into a time, but no claim's date comparison
// ever matches it: the task stayed pending for ever. It is set invalid,
// naming run_at.
func TestRunAtWrittenAsTextIsNamed(t *testing.T) {
	for name, v := range map[string]any{"a string": "2026-11-26T10:54:28Z", "a number": int64(1795690468175)} {
		t.Run(name, func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			p := newProducer[int](t, coll, nil)
			scnMetaPublish(t, p, mscheduler.Task[int]{Key: "k"})
			setFields(t, coll, "k", bson.D{{Key: "run_at", Value: v}})
			c := startConsumer(t, coll, scnMetaOK, scnMetaConfig("w", mschedulertest.NewEvents()))
			scnMetaWaitLeader(t, coll, c)
			scnMetaWaitInvalid(t, coll, "k", "run_at")
		})
	}
}
