package soak

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// testVandal is a vandal that touched the tasks of edits (key, what), with
// the specs of keys, and the clones (clone _id → key).
func testVandal(keys []string, edits [][2]string, clones map[string]string) *vandal {
	v := &vandal{specs: map[string]spec{}, touched: map[string][]int{}, clones: clones, history: map[string]bool{}}
	for _, k := range keys {
		v.specs[k] = spec{key: k, kind: kindQuick, concurrency: 1}
	}
	for _, e := range edits {
		v.record(vandalEdit{target: "tasks", id: e[0], key: e[0], what: e[1]})
	}
	return v
}

func rawDoc(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestStaleHolders: a holder whose lease lapsed more than the bound ago
// fails the test on the second poll in a row that sees it, and only then.
func TestStaleHolders(t *testing.T) {
	now := time.Now()
	task := func(id string, lapsedFor time.Duration) liveTask {
		return liveTask{ID: rawString(id), Key: id, Status: "running", Running: 1,
			Holders: map[string]liveHolder{"w1": {Run: "r-" + id, LeaseUntil: now.Add(-lapsedFor)}}}
	}
	fast, slow := 100*time.Millisecond, 2*time.Second // round trips: the bound is staleSlack, then 15 of them
	past, within := staleSlack+2*time.Second, staleSlack-time.Second
	for _, tc := range []struct {
		name  string
		polls []liveTasks
		took  time.Duration
		fails int
	}{
		{"held past the bound on two polls", []liveTasks{{task("a", past)}, {task("a", past+time.Second)}}, fast, 1},
		{"held past the bound on one poll, then freed", []liveTasks{{task("a", past)}, {}}, fast, 0},
		{"freed, then held again past the bound", []liveTasks{{task("a", past)}, {}, {task("a", past)}}, fast, 0},
		{"lapsed within the bound", []liveTasks{{task("a", time.Second)}, {task("a", within)}, {task("a", within)}}, fast, 0},
		{"two tasks", []liveTasks{{task("a", past), task("b", past)}, {task("a", past+time.Second), task("b", past+time.Second)}}, fast, 2},
		{"past the slack, within the round trips of a slow server", []liveTasks{{task("a", past)}, {task("a", 25*time.Second)}}, slow, 0},
		{"past the round trips of a slow server", []liveTasks{{task("a", 31*time.Second)}, {task("a", 32*time.Second)}}, slow, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			s := &staleHolders{t: rec, v: testVandal(nil, nil, nil), prev: map[string]bool{}}
			for _, p := range tc.polls {
				s.poll(p, tc.took)
			}
			if len(rec.errors) != tc.fails {
				t.Errorf("%d failures, want %d: %v", len(rec.errors), tc.fails, rec.errors)
			}
		})
	}
}

// rawString is s as a BSON value.
func rawString(s string) bson.RawValue {
	typ, data, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: typ, Value: data}
}

// TestCheckTouched: touched tasks and clones must end final, or invalid
// with the field named, with no run going; untouched ones are left to
// TestSoak's checks; a document nobody published or cloned fails.
func TestCheckTouched(t *testing.T) {
	holder := bson.D{{Key: "w1", Value: bson.D{{Key: "run", Value: "r1"}, {Key: "lease_until", Value: time.Now()}}}}
	invalid := func(field string) bson.E {
		return bson.E{Key: "invalid", Value: bson.D{{Key: "reason", Value: "…"}, {Key: "field", Value: field}}}
	}
	docs := map[string]bson.D{
		"a-invalid-no-field": {{Key: "status", Value: "invalid"}, {Key: "running", Value: int32(0)}},
		"b-invalid":          {{Key: "status", Value: "invalid"}, {Key: "running", Value: int32(0)}, invalid("max_retries")},
		"c-held":             {{Key: "status", Value: "succeeded"}, {Key: "running", Value: int32(1)}, {Key: "holders", Value: holder}},
		"d-untouched":        {{Key: "status", Value: "pending"}},
		"e-invalid-count":    {{Key: "status", Value: "invalid"}, {Key: "running", Value: int32(1)}, {Key: "holders", Value: bson.A{int32(1)}}, invalid("holders")},
		"f-counted":          {{Key: "status", Value: "succeeded"}, {Key: "running", Value: int32(1)}},
		"g-pending":          {{Key: "status", Value: "pending"}, {Key: "running", Value: int32(0)}},
		"h-garbage":          {{Key: "status", Value: int32(0)}},
		"i-cancelled":        {{Key: "status", Value: "cancelled"}, {Key: "running", Value: bson.D{{Key: "x", Value: int32(1)}}}},
		"clone-1-i":          {{Key: "status", Value: "running"}, {Key: "running", Value: int32(0)}},
		"nobody":             {{Key: "status", Value: "succeeded"}},
	}
	var keys []string
	var edits [][2]string
	raws := map[string]bson.Raw{}
	for id, d := range docs {
		raws[id] = rawDoc(t, append(bson.D{{Key: "_id", Value: id}}, d...))
		if id != "nobody" && !strings.HasPrefix(id, "clone-") {
			keys = append(keys, id)
			if id != "d-untouched" {
				edits = append(edits, [2]string{id, "an edit"})
			}
		}
	}
	rec := &recorder{TB: t}
	checkTouched(rec, raws, testVandal(keys, edits, map[string]string{"clone-1-i": "i-cancelled"}))
	want := []string{"a-invalid-no-field", "c-held", "f-counted", "g-pending", "h-garbage", "clone-1-i", "nobody"}
	if len(rec.errors) != len(want) {
		t.Errorf("%d failures, want %d (%v):\n%s", len(rec.errors), len(want), want, strings.Join(rec.errors, "\n"))
	}
	for _, id := range want {
		found := false
		for _, e := range rec.errors {
			found = found || strings.Contains(e, " "+id+":") || strings.Contains(e, "document "+id+" ")
		}
		if !found {
			t.Errorf("no failure for %s:\n%s", id, strings.Join(rec.errors, "\n"))
		}
	}
}
