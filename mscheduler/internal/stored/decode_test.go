package stored

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// sound is a pending task as the library writes it.
func sound() bson.D {
	now := time.Now()
	return bson.D{
		{Key: FID, Value: "k"}, {Key: FKey, Value: "k"}, {Key: FSchema, Value: SchemaVersion}, {Key: FStatus, Value: "pending"},
		{Key: FRunAt, Value: now}, {Key: FConcurrency, Value: 1}, {Key: FFree, Value: 1}, {Key: FRunning, Value: 0},
		{Key: FSucceeded, Value: 0}, {Key: FFailedRuns, Value: 0}, {Key: FPingIntervalMS, Value: 1000},
		{Key: FWorkerTimeoutMS, Value: 3000}, {Key: FMaxFailedRuns, Value: 3}, {Key: FMaxRetries, Value: 2}, {Key: FRev, Value: 0},
	}
}

func with(d bson.D, field string, v any) bson.D {
	out := bson.D{}
	for _, e := range d {
		if e.Key != field {
			out = append(out, e)
		}
	}
	if v != nil {
		out = append(out, bson.E{Key: field, Value: v})
	}
	return out
}

func TestDecodeTaskNamesTheField(t *testing.T) {
	lease := bson.D{{Key: HRun, Value: "r"}, {Key: HStarted, Value: time.Now()}, {Key: HLeaseUntil, Value: time.Now()}}
	cases := []struct {
		name  string
		doc   bson.D
		field string
	}{
		{"sound", sound(), ""},
		{"an ObjectId _id (a clone)", with(sound(), FID, bson.NewObjectID()), FID},
		{"a key that is not the _id", with(sound(), FKey, "other"), FKey},
		{"no key field", with(sound(), FKey, nil), ""},
		{"no status", with(sound(), FStatus, nil), FStatus},
		{"an unknown status", with(sound(), FStatus, "done"), FStatus},
		{"running with no holder", with(with(sound(), FStatus, "running"), FFree, 1), FStatus},
		{"a running counter with no holder", with(with(sound(), FRunning, 99), FFree, 0), FRunning},
		{"a holder with no running counter", with(sound(), FHolders, bson.D{{Key: "w", Value: lease}}), FRunning},
		{"a group of the wrong type", with(sound(), FGroup, bson.A{bson.D{{Key: "x", Value: 1}}}), FGroup},
		{"runs not an array", with(sound(), FRuns, "junk"), FRuns},
		{"a holder's lease not a date", with(sound(), FHolders, bson.D{{Key: "w", Value: bson.D{{Key: HLeaseUntil, Value: "soon"}}}}), "holders.w.lease_until"},
		{"a pending task with no free slot", with(sound(), FFree, 0), FFree},
		{"free out of step", with(with(sound(), FConcurrency, 3), FFree, 2), FFree},
		{"a finished task's counters do not matter", with(with(sound(), FStatus, "succeeded"), FFree, "x"), FFree},
		{"unlogged not a document of dates", with(sound(), FUnlogged, "x"), FUnlogged},
		{"a run_at written as a string date", with(sound(), FRunAt, "2026-11-26T10:54:28Z"), FRunAt},
		{"a run_at written as a number", with(sound(), FRunAt, int64(1795690468175)), FRunAt},
		{"a holder's lease written as a string date", with(with(with(sound(), FStatus, "running"), FRunning, 1), FHolders,
			bson.D{{Key: "w", Value: bson.D{{Key: HRun, Value: "r"}, {Key: HStarted, Value: time.Now()}, {Key: HLeaseUntil, Value: "2026-11-26T10:54:28Z"}}}}), "holders.w.lease_until"},
		{"a plan's planned time as a string", with(sound(), FPlan, bson.D{{Key: "kind", Value: "every"}, {Key: "planned", Value: "2026-11-26T10:54:28Z"}}), PPlanned},
		{"an invalid task with no note", with(sound(), FStatus, "invalid"), FStatus},
		{"an invalid task whose note is not a document", with(with(sound(), FStatus, "invalid"), FInvalid, 7), FInvalid},
		{"an invalid task with its note", with(with(sound(), FStatus, "invalid"), FInvalid, bson.D{{Key: "reason", Value: "field x is wrong"}}), ""},
	}
	for _, c := range cases {
		raw, err := bson.Marshal(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		_, prob := DecodeTask(raw)
		switch {
		case c.field == "" && prob != nil:
			t.Errorf("%s: problem %v, want none", c.name, prob)
		case c.field != "" && (prob == nil || prob.Field != c.field):
			t.Errorf("%s: problem %v, want one on %s", c.name, prob, c.field)
		}
	}
}

// TestDecodeTaskKeepsTheIDAsRead holds the other half of the class of
// fences on decoded copies: whatever the key field says, the task's key
// is its _id, and its raw _id is kept to fence on.
func TestDecodeTaskKeepsTheIDAsRead(t *testing.T) {
	oid := bson.NewObjectID()
	raw, _ := bson.Marshal(with(sound(), FID, oid))
	task, _ := DecodeTask(raw)
	if got, ok := task.RawID.ObjectIDOK(); !ok || got != oid {
		t.Fatalf("RawID = %v, want the ObjectId read", task.RawID)
	}
	if task.Key == "k" {
		t.Fatalf("Key = %q: a clone reads as its original's key", task.Key)
	}
	raw, _ = bson.Marshal(with(sound(), FID, "copy-1"))
	if task, _ := DecodeTask(raw); task.Key != "copy-1" {
		t.Fatalf("Key = %q, want the _id copy-1", task.Key)
	}
}

func TestDecodeFieldsReportsEveryBadField(t *testing.T) {
	raw, _ := bson.Marshal(with(with(sound(), FConcurrency, "x"), FRuns, 5))
	task, probs := DecodeFields(raw)
	var fields []string
	for _, p := range probs {
		fields = append(fields, p.Field)
	}
	if strings.Join(fields, ",") != "concurrency,runs" {
		t.Fatalf("problems on %v, want concurrency and runs", fields)
	}
	if task.Status != StatusPending || task.Free != 1 {
		t.Fatalf("the fields that decode are left out: %+v", task)
	}
}

func TestLeaseOf(t *testing.T) {
	for _, c := range []struct {
		doc   bson.D
		field string
	}{
		{bson.D{{Key: "holder", Value: "w"}, {Key: "lease_until", Value: time.Now()}}, ""},
		{bson.D{{Key: "holder", Value: "w"}, {Key: "lease_until", Value: "2020-01-01"}}, "lease_until"},
		{bson.D{{Key: "holder", Value: "w"}}, "lease_until"},
		{bson.D{{Key: "junk", Value: 1}}, "holder"},
	} {
		raw, _ := bson.Marshal(c.doc)
		_, prob := LeaseOf(raw)
		if (prob == nil) != (c.field == "") || prob != nil && prob.Field != c.field {
			t.Errorf("LeaseOf(%v) = %v, want a problem on %q", c.doc, prob, c.field)
		}
	}
}

func TestSchemaVersionOf(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
		bad  bool
	}{{2, 2, false}, {int64(1), 1, false}, {"2", 0, true}, {nil, 0, true}} {
		doc := bson.D{}
		if c.v != nil {
			doc = bson.D{{Key: "version", Value: c.v}}
		}
		raw, _ := bson.Marshal(doc)
		v, prob := SchemaVersionOf(raw)
		if v != c.want || (prob != nil) != c.bad {
			t.Errorf("SchemaVersionOf(%v) = %d, %v", c.v, v, prob)
		}
	}
}

func TestFromMSSaturates(t *testing.T) {
	if d := FromMS(1e18); d <= 0 {
		t.Fatalf("FromMS(1e18) = %s: overflowed", d)
	}
	if d := FromMS(-1e18); d >= 0 {
		t.Fatalf("FromMS(-1e18) = %s: overflowed", d)
	}
}

func TestDescribeValueBoundsItsText(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	_, v, _ := bson.MarshalValue(big)
	if s := DescribeValue(bson.RawValue{Type: bson.TypeString, Value: v}); len(s) > 100 {
		t.Fatalf("a 1 MB string is described in %d bytes", len(s))
	}
}
