package stored

import (
	"maps"
	"reflect"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// HistoryRecord is one run in the history collection, <name>.runs, keyed
// by its run id.
type HistoryRecord struct {
	ID       string     `bson:"_id"` // the run id
	Key      string     `bson:"key"`
	Record   RunRecord  `bson:",inline"`
	ExpireAt *time.Time `bson:"expire_at,omitempty"`
}

// historyFields are the fields of a history record, with their Go types.
var historyFields = func() map[string]reflect.Type {
	fields := FieldsOf(reflect.TypeFor[RunRecord]())
	maps.Copy(fields, FieldsOf(reflect.TypeFor[HistoryRecord]()))
	delete(fields, "") // the inline record
	return fields
}()

// DecodeHistory is the gate of history records. It never fails: a field
// that does not decode is left zero, and the problem names the first such
// field, or else a finish time that is not a date.
func DecodeHistory(raw bson.Raw) (*HistoryRecord, *Problem) {
	var d HistoryRecord
	prob := DecodeLenient(raw, historyFields, &d)
	if prob == nil {
		prob = DateProblem(raw, "finished")
	}
	if d.Record.RunID == "" { // a record written by hand without run_id
		d.Record.RunID = d.ID
	}
	return &d, prob
}

// KeptRuns decodes the run records a task keeps under runs, record by
// record: one edited out of shape is left out, never failing the others.
// A runs that is not an array keeps none.
func KeptRuns(raw bson.Raw) []RunRecord {
	arr, ok := raw.Lookup(FRuns).ArrayOK()
	if !ok {
		return nil
	}
	values, _ := arr.Values()
	out := make([]RunRecord, 0, len(values))
	for _, v := range values {
		var r RunRecord
		if err := v.Unmarshal(&r); err == nil && r.RunID != "" {
			out = append(out, r)
		}
	}
	return out
}

// Marks decodes a task's history marks (unlogged: run id -> finish time),
// mark by mark: one whose time is not a date is kept with a zero time, so
// that it is still written and removed.
func Marks(raw bson.Raw) map[string]time.Time {
	doc, ok := raw.Lookup(FUnlogged).DocumentOK()
	if !ok {
		return nil
	}
	elems, _ := doc.Elements()
	out := make(map[string]time.Time, len(elems))
	for _, e := range elems {
		at, _ := e.Value().TimeOK()
		out[e.Key()] = at
	}
	return out
}
