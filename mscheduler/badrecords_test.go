package mscheduler_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// Run records and worker documents are edited by hand too: a record of
// the wrong shape is listed with its problem, and never keeps the others
// from being listed or paged through.

// historyRecord is a sound run record as a worker writes it.
func historyRecord(id string, finished time.Time, outcome string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "key", Value: "k"}, {Key: "run_id", Value: id}, {Key: "worker_id", Value: "w"},
		{Key: "started", Value: finished.Add(-time.Second)}, {Key: "lease_until", Value: finished.Add(time.Minute)},
		{Key: "finished", Value: finished}, {Key: "outcome", Value: outcome}, {Key: "attempts", Value: 1}, {Key: "result", Value: "r-" + id}}
}

// edited is a copy of d with field set to v (added if missing), or removed
// when v is unset.
func edited(d bson.D, field string, v any) bson.D {
	out := slices.Clone(d)
	for i := range out {
		if out[i].Key == field {
			if v == unset {
				return slices.Delete(out, i, i+1)
			}
			out[i].Value = v
			return out
		}
	}
	return append(out, bson.E{Key: field, Value: v})
}

type unsetField struct{}

var unset = unsetField{}

// badHistory writes sound and hand-edited run records into coll's history
// and returns the problem each bad record must be listed with, by run id
// ("" for a sound one).
func badHistory(t *testing.T, coll *mongo.Collection) map[string]string {
	t.Helper()
	base := time.Now().UTC().Truncate(time.Millisecond)
	at := func(i int) time.Time { return base.Add(-time.Duration(i) * time.Second) }
	oid := bson.NewObjectID()
	records := []struct {
		doc     bson.D
		id      string // the run id Runs reports
		problem string
	}{
		{historyRecord("good-1", at(1), "succeeded"), "good-1", ""},
		{edited(historyRecord("bad-outcome", at(2), "failed"), "outcome", 5), "bad-outcome", `field outcome must be a string, got 32-bit integer {"$numberInt":"5"}`},
		{historyRecord("good-3", at(3), "failed"), "good-3", ""},
		{edited(historyRecord("bad-attempts", at(4), "failed"), "attempts", "two"), "bad-attempts", `field attempts must be a whole number, got string "two"`},
		{historyRecord("good-5", at(5), "succeeded"), "good-5", ""},
		// Written in mongosh without an _id: the server gives it an ObjectId.
		{edited(historyRecord("oid-run", at(6), "succeeded"), "_id", oid), "oid-run", "field _id must be a string, got objectID"},
		{historyRecord("good-7", at(7), "succeeded"), "good-7", ""},
		// Finish times that sort apart from dates: above them (a
		// timestamp), below them (a string, a number), or as null.
		{edited(historyRecord("bad-finished", at(8), "failed"), "finished", "yesterday"), "bad-finished", `field finished must be a date, got string "yesterday"`},
		{edited(historyRecord("number-finished", at(9), "failed"), "finished", at(9).UnixMilli()), "number-finished", "field finished must be a date, got 64-bit integer"},
		{edited(historyRecord("ts-finished", at(10), "failed"), "finished", bson.Timestamp{T: uint32(at(10).Unix())}), "ts-finished", "field finished must be a date, got timestamp"},
		{edited(historyRecord("no-finished", at(11), "failed"), "finished", unset), "no-finished", "field finished is missing"},
		{edited(historyRecord("null-finished", at(12), "failed"), "finished", nil), "null-finished", "field finished is missing"},
		{edited(edited(historyRecord("no-finished-oid", at(13), "failed"), "finished", unset), "_id", bson.NewObjectID()), "no-finished-oid", "field _id must be a string"},
		{edited(historyRecord("bad-started", at(14), "succeeded"), "started", "an hour ago"), "bad-started", `field started must be a date, got string "an hour ago"`},
		{historyRecord("good-15", at(15), "failed"), "good-15", ""},
	}
	docs := make([]any, len(records))
	want := map[string]string{}
	for i, r := range records {
		docs[i] = r.doc
		want[r.id] = r.problem
	}
	if _, err := historyOf(coll).InsertMany(ctxT(t), docs); err != nil {
		t.Fatalf("write the history by hand: %v", err)
	}
	return want
}

// TestRunsListsBadRecords: Runs lists hand-edited run records beside the
// sound ones, each with the fields that could be read and a problem that
// names the field at fault; the sound ones are read whole.
func TestRunsListsBadRecords(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	want := badHistory(t, coll)
	page, err := p.Runs(ctxT(t), mscheduler.RunFilter{Limit: 100})
	if err != nil {
		t.Fatalf("Runs with hand-edited records: %v", err)
	}
	if page.Next != "" || len(page.Runs) != len(want) {
		t.Fatalf("Runs listed %d records (next %q), want all %d", len(page.Runs), page.Next, len(want))
	}
	for _, r := range page.Runs {
		prob, ok := want[r.RunID]
		if !ok {
			t.Errorf("listed a record with run id %q: %+v", r.RunID, r)
			continue
		}
		got := r.Problem
		switch {
		case prob == "" && got != "":
			t.Errorf("sound record %s listed with problem %q", r.RunID, got)
		case prob != "" && !strings.HasPrefix(got, prob):
			t.Errorf("record %s listed with problem %q, want %q", r.RunID, got, prob)
		}
		if r.Key != "k" {
			t.Errorf("record %s: key %q, want k", r.RunID, r.Key)
		}
	}
	byID := map[string]mscheduler.RunInfo{}
	for _, r := range page.Runs {
		byID[r.RunID] = r
	}
	// Sound records, read whole.
	for _, id := range []string{"good-1", "good-3", "good-5", "good-7", "good-15"} {
		r := byID[id]
		var result string
		if r.WorkerID != "w" || r.Attempts != 1 || r.Finished.IsZero() || r.Started != r.Finished.Add(-time.Second) ||
			r.Result.Unmarshal(&result) != nil || result != "r-"+id || (r.Outcome != mscheduler.OutcomeSucceeded && r.Outcome != mscheduler.OutcomeFailed) {
			t.Errorf("sound record %s not read whole: %+v", id, r)
		}
	}
	// Bad ones: what could be read.
	if r := byID["bad-outcome"]; r.Outcome != "" || r.WorkerID != "w" || r.Attempts != 1 || r.Finished.IsZero() {
		t.Errorf("bad-outcome: %+v, want every field but the outcome", r)
	}
	if r := byID["bad-attempts"]; r.Attempts != 0 || r.Outcome != mscheduler.OutcomeFailed || r.Finished.IsZero() {
		t.Errorf("bad-attempts: %+v, want every field but the attempts", r)
	}
	if r := byID["bad-finished"]; !r.Finished.IsZero() || r.WorkerID != "w" || r.Started.IsZero() {
		t.Errorf("bad-finished: %+v, want every field but the finish time", r)
	}
	// Newest first: the dates in order, then what sorts below them.
	var dated []time.Time
	for _, r := range page.Runs {
		if r.Problem == "" {
			dated = append(dated, r.Finished)
		}
	}
	if !slices.IsSortedFunc(dated, func(a, b time.Time) int { return b.Compare(a) }) {
		t.Errorf("sound records not newest first: %v", dated)
	}
	if last := page.Runs[len(page.Runs)-1].RunID; last != "null-finished" && last != "no-finished" && last != "no-finished-oid" {
		t.Errorf("last record %s, want one without a finish time", last)
	}

	// Filters select as before: a bad record whose filtered field is not
	// as selected is left out, the others are listed.
	failed, err := p.Runs(ctxT(t), mscheduler.RunFilter{Outcome: mscheduler.OutcomeFailed, Since: time.Now().Add(-time.Hour), Limit: 100})
	if err != nil {
		t.Fatalf("Runs of failed runs: %v", err)
	}
	var ids []string
	for _, r := range failed.Runs {
		ids = append(ids, r.RunID)
	}
	if !slices.Equal(ids, []string{"good-3", "bad-attempts", "good-15"}) {
		t.Errorf("failed runs of the last hour: %v, want good-3, bad-attempts, good-15", ids)
	}
}

// TestRunsPagesPastBadRecords: paging through the history with small
// pages, by the cursor each page gives, visits every record once, in the
// order of a single page, whatever the last record of a page holds.
func TestRunsPagesPastBadRecords(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	want := badHistory(t, coll)
	whole, err := p.Runs(ctxT(t), mscheduler.RunFilter{Limit: 100})
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	order := make([]string, len(whole.Runs))
	for i, r := range whole.Runs {
		order[i] = r.RunID
	}
	for _, start := range []mscheduler.RunFilter{{Limit: 1}, {Limit: 2}, {Limit: 3}, {Key: "k", Limit: 2}, {Key: "k", Limit: 4}} {
		f := start
		var seen []string
		problems := 0
		for pages := 0; ; pages++ {
			if pages > 2*len(want) {
				t.Fatalf("%+v: still paging after %d pages (%v): paging loops", start, pages, seen)
			}
			page, err := p.Runs(ctxT(t), f)
			if err != nil {
				t.Fatalf("%+v: page %d: %v", start, pages+1, err)
			}
			if len(page.Runs) > f.Limit || (page.Next != "" && len(page.Runs) != f.Limit) {
				t.Fatalf("%+v: page %d has %d runs (next %q)", start, pages+1, len(page.Runs), page.Next)
			}
			for _, r := range page.Runs {
				seen = append(seen, r.RunID)
				if r.Problem != "" {
					problems++
				}
			}
			if page.Next == "" {
				break
			}
			f.After = page.Next
		}
		if !slices.Equal(seen, order) {
			t.Errorf("paging %+v visited\n%v\nwant each record once, as one page lists them:\n%v", start, seen, order)
		}
		wantProblems := 0
		for _, prob := range want {
			if prob != "" {
				wantProblems++
			}
		}
		if problems != wantProblems {
			t.Errorf("paging %+v: %d problems, want %d", start, problems, wantProblems)
		}
	}
}

// ownDatabase is a database of the test's own, dropped at its end, for
// the worker registry (one collection per database).
func ownDatabase(t *testing.T) *mongo.Database {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := mschedulertest.Client().Database("mscheduler_test_" + hex.EncodeToString(b[:]))
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	return db
}

// TestListWorkersListsBadRecords: ListWorkers lists hand-edited worker
// documents beside the sound ones, each with the fields that could be read
// and a problem that names the field at fault.
func TestListWorkersListsBadRecords(t *testing.T) {
	db := ownDatabase(t)
	ctx := ctxT(t)
	started := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	sound := func(id string) mscheduler.WorkerInfo {
		return mscheduler.WorkerInfo{ID: id, Host: "box", PID: 42, Version: mscheduler.Version, Collections: []string{"tasks"},
			Groups: []string{"g"}, Capacity: 4, Running: 1, StartedAt: started, HeartbeatMS: 10_000}
	}
	edits := map[string]bson.D{
		"bad-pid":       {{Key: "pid", Value: "abc"}},
		"bad-heartbeat": {{Key: "heartbeat_ms", Value: "x"}},
		"bad-last-seen": {{Key: "last_seen", Value: "x"}},
		"bad-groups":    {{Key: "groups", Value: "g"}},
	}
	for _, id := range []string{"a-good", "bad-groups", "bad-heartbeat", "bad-last-seen", "bad-pid", "z-good"} {
		if err := mscheduler.Heartbeat(ctx, db, sound(id)); err != nil {
			t.Fatal(err)
		}
		if set, ok := edits[id]; ok {
			if _, err := db.Collection(mscheduler.WorkersCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Written in mongosh without an _id.
	if _, err := db.Collection(mscheduler.WorkersCollection).InsertOne(ctx, bson.D{{Key: "host", Value: "by-hand"}, {Key: "last_seen", Value: time.Now()}}); err != nil {
		t.Fatal(err)
	}

	ws, err := mscheduler.ListWorkers(ctx, db)
	if err != nil {
		t.Fatalf("ListWorkers with hand-edited documents: %v", err)
	}
	if len(ws) != 7 {
		t.Fatalf("ListWorkers listed %d workers, want 7: %+v", len(ws), ws)
	}
	byID := map[string]mscheduler.WorkerInfo{}
	for _, w := range ws {
		byID[w.ID] = w
	}
	for _, id := range []string{"a-good", "z-good"} {
		w := byID[id]
		want := sound(id)
		if w.Problem != "" || w.Stale || w.Host != want.Host || w.PID != want.PID || w.Version != want.Version || !slices.Equal(w.Collections, want.Collections) ||
			!slices.Equal(w.Groups, want.Groups) || w.Capacity != 4 || w.Running != 1 || !w.StartedAt.Equal(started) || w.HeartbeatMS != 10_000 || w.LastSeen.IsZero() {
			t.Errorf("sound worker %s not read whole: %+v", id, w)
		}
	}
	wantProblems := map[string]string{
		"bad-pid":       `field pid must be a whole number, got string "abc"`,
		"bad-heartbeat": `field heartbeat_ms must be a whole number, got string "x"`,
		"bad-last-seen": `field last_seen must be a date, got string "x"`,
		"bad-groups":    `field groups must be an array of strings, got string "g"`,
		"":              "field _id must be a string, got objectID",
	}
	for id, prob := range wantProblems {
		w, ok := byID[id]
		if !ok || !strings.HasPrefix(w.Problem, prob) {
			t.Errorf("worker %q: listed %v with problem %q, want %q", id, ok, w.Problem, prob)
		}
	}
	// What could be read is there.
	if w := byID["bad-pid"]; w.PID != 0 || w.Host != "box" || w.Capacity != 4 || w.LastSeen.IsZero() || w.Stale {
		t.Errorf("bad-pid: %+v, want every field but the pid, and live", w)
	}
	if w := byID["bad-groups"]; w.Groups != nil || !slices.Equal(w.Collections, []string{"tasks"}) || w.Stale {
		t.Errorf("bad-groups: %+v, want every field but the groups", w)
	}
	if w := byID["bad-last-seen"]; !w.LastSeen.IsZero() || !w.Stale || w.Host != "box" {
		t.Errorf("bad-last-seen: %+v, want it stale, with its other fields", w)
	}
	if w := byID[""]; w.Host != "by-hand" || w.LastSeen.IsZero() {
		t.Errorf("worker without a string _id: %+v, want its host and last seen", w)
	}
}
