package mscheduler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestHotQueriesUseIndexes explains every hot-path query on a real MongoDB
// (MONGODB_URI) and fails on a collection scan, or on a sort in memory of
// a claim (the claim index gives claim order). The development server
// scans every query, so there it only checks that the commands are valid.
func TestHotQueriesUseIndexes(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	tasks := make([]mscheduler.Task[int], 300)
	for i := range tasks {
		tasks[i] = mscheduler.Task[int]{Key: fmt.Sprintf("t%03d", i), Priority: i % 3, Tags: []string{fmt.Sprintf("tag%d", i%10)}}
	}
	if _, err := p.PublishMany(ctxT(t), tasks, nil); err != nil {
		t.Fatal(err)
	}
	onMongo := mschedulertest.Server() == nil && !isFerret(t)
	for _, q := range mscheduler.HotQueries(coll.Name(), time.Now()) {
		var reply bson.Raw
		err := coll.Database().RunCommand(ctxT(t), bson.D{{Key: "explain", Value: q.Explain}, {Key: "verbosity", Value: "queryPlanner"}}).Decode(&reply)
		if err != nil {
			t.Fatalf("explain %s: %v", q.Name, err)
		}
		if !onMongo {
			continue
		}
		winning, err := reply.LookupErr("queryPlanner", "winningPlan")
		if err != nil {
			t.Fatalf("explain %s: no winning plan in %s", q.Name, reply)
		}
		stages := planStages(winning)
		switch {
		case strings.Contains(stages, "COLLSCAN"):
			t.Errorf("%s scans the collection: %s", q.Name, stages)
		case q.InOrder && slices.Contains(strings.Split(stages, " > "), "SORT"):
			t.Errorf("%s sorts in memory, not in the index's order: %s", q.Name, stages)
		default:
			t.Logf("%s: %s", q.Name, stages)
		}
	}
	if !onMongo {
		t.Log("development server: explains are valid; index use is checked against MongoDB (set MONGODB_URI)")
	}
}

// planStages lists the stage names of a plan tree, outermost first.
func planStages(v bson.RawValue) string {
	doc, ok := v.DocumentOK()
	if !ok {
		return ""
	}
	var out []string
	if s, ok := doc.Lookup("stage").StringValueOK(); ok {
		out = append(out, s)
	}
	for _, child := range []string{"inputStage", "queryPlan"} {
		if c, err := doc.LookupErr(child); err == nil {
			out = append(out, planStages(c))
		}
	}
	if arr, ok := doc.Lookup("inputStages").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, c := range vals {
			out = append(out, planStages(c))
		}
	}
	return strings.Join(out, " > ")
}

// isFerret reports a FerretDB server behind MONGODB_URI.
func isFerret(t *testing.T) bool {
	var info bson.M
	if err := mschedulertest.Client().Database("admin").RunCommand(ctxT(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		t.Fatalf("buildInfo: %v", err)
	}
	_, ferret := info["ferretdb"]
	return ferret
}
