package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestLockReportSumsEachKindOfCommand(t *testing.T) {
	report := &lockReport{}
	s := startServer(t, testStreams(), func(f *front) { f.locks, f.locksEvery = report, time.Hour })
	ctx := context.Background()
	watched, other := s.db.Collection("watched"), s.db.Collection("other")
	stream, err := watched.Watch(ctx, bson.A{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close(ctx)
	for i := range 3 {
		if _, err := watched.InsertOne(ctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.InsertOne(ctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := watched.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}

	keyed := s.db.Collection("keyed")
	if _, err := keyed.InsertOne(ctx, bson.D{{Key: "_id", Value: "s"}, {Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.UpdateOne(ctx, bson.D{{Key: "_id", Value: "s"}, {Key: "x", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "y", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}

	kinds := report.take()
	if k := kinds["update keyed (by key)"]; k == nil || k.n != 1 {
		t.Errorf("update keyed (by key): %+v, want the fenced update, sent by key", k)
	}
	for _, kind := range []string{"insert watched", "insert other"} {
		if k := kinds[kind]; k == nil || k.n != 3 || k.held <= 0 {
			t.Errorf("%s: %+v, want 3 commands that held the lock", kind, k)
		}
	}
	if k := kinds["update watched"]; k == nil || k.n != 1 || k.covered <= 0 || k.covered > k.held {
		t.Errorf("update watched: %+v, want one command, part of its time the streams' reads", k)
	}
	if k := kinds["update other"]; k == nil || k.n != 1 || k.covered != 0 {
		t.Errorf("update other: %+v, want one command and no streams' reads", k)
	}
	if again := report.take(); len(again) != 0 {
		t.Errorf("a report started afresh holds %v", again)
	}

	line := lockReportLine(kinds, time.Second)
	for _, want := range []string{"insert watched 3×", "update watched 1×", "streams' reads", "commands ("} {
		if !strings.Contains(line, want) {
			t.Errorf("report line %q does not say %q", line, want)
		}
	}
}

func TestLockReportLineNamesTheCostliestFirst(t *testing.T) {
	kinds := map[string]*lockKind{
		"find tasks":    {n: 10, held: 400 * time.Millisecond},
		"getMore tasks": {n: 50, held: 50 * time.Millisecond},
		"update tasks":  {n: 5, held: 500 * time.Millisecond, covered: 300 * time.Millisecond},
	}
	line := lockReportLine(kinds, 2*time.Second)
	u, f, g := strings.Index(line, "update tasks"), strings.Index(line, "find tasks"), strings.Index(line, "getMore tasks")
	if !(u >= 0 && u < f && f < g) {
		t.Errorf("report line %q is not ordered by time held", line)
	}
	if !strings.HasPrefix(line, "lock held 48% of 2s, 65 commands (32.5/s):") {
		t.Errorf("report line %q: wrong totals", line)
	}
}

func TestLockReportFlag(t *testing.T) {
	t.Setenv(envLockReport, "5s")
	cfg, err := parseFlags([]string{"-dir", t.TempDir()})
	if err != nil || cfg.lockReport != 5*time.Second {
		t.Errorf("$%s=5s gave %s, %v", envLockReport, cfg.lockReport, err)
	}
	if cfg, err = parseFlags([]string{"-dir", t.TempDir(), "-lock-report", "1s"}); err != nil || cfg.lockReport != time.Second {
		t.Errorf("-lock-report 1s gave %s, %v", cfg.lockReport, err)
	}
	if _, err = parseFlags([]string{"-dir", t.TempDir(), "-lock-report", "-1s"}); err == nil || !strings.Contains(err.Error(), "-lock-report") {
		t.Errorf("-lock-report -1s gave %v, want an error naming the flag", err)
	}
	if cfg.lockReportShapes {
		t.Errorf("shapes on with neither -lock-report-shapes nor $%s", envLockReportShapes)
	}
	t.Setenv(envLockReportShapes, "1")
	if cfg, err = parseFlags([]string{"-dir", t.TempDir()}); err != nil || !cfg.lockReportShapes {
		t.Errorf("$%s=1 gave shapes %v, %v", envLockReportShapes, cfg.lockReportShapes, err)
	}
	if cfg, err = parseFlags([]string{"-dir", t.TempDir(), "-lock-report-shapes=false"}); err != nil || cfg.lockReportShapes {
		t.Errorf("-lock-report-shapes=false beside $%s gave shapes %v, %v", envLockReportShapes, cfg.lockReportShapes, err)
	}
	t.Setenv(envLockReport, "soon")
	if _, err = parseFlags([]string{"-dir", t.TempDir()}); err == nil || !strings.Contains(err.Error(), envLockReport) {
		t.Errorf("$%s=soon gave %v, want an error naming it", envLockReport, err)
	}
}

// TestCommandShapeNamesWhatTheFilterTests: with shapes on, the report tells commands apart by the
// fields their filters test and how, one kind for every worker's entry of a map, and a command
// whose parts are not of the types it expects still has a kind.
func TestCommandShapeNamesWhatTheFilterTests(t *testing.T) {
	msg := func(body bson.D) []byte {
		t.Helper()
		doc, err := bson.Marshal(append(body, bson.E{Key: "$db", Value: "db"}))
		if err != nil {
			t.Fatal(err)
		}
		return opMsgBytes(0, doc)
	}
	report := &lockReport{shapes: true}
	lte := bson.D{{Key: "$lte", Value: 5}}
	for _, c := range []struct {
		body bson.D
		want string
	}{
		{bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: bson.D{{Key: "status", Value: "p"}, {Key: "run_at", Value: lte}, {Key: "holders.w1.run", Value: bson.D{{Key: "$exists", Value: false}}}}},
			{Key: "sort", Value: bson.D{{Key: "priority", Value: -1}}}},
			"find tasks {holders.…:$exists,run_at:$lte,status} sort{priority}"},
		{bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: bson.D{{Key: "holders.w2.run", Value: bson.D{{Key: "$exists", Value: false}}}, {Key: "run_at", Value: lte}, {Key: "status", Value: "p"}}},
			{Key: "sort", Value: bson.D{{Key: "priority", Value: -1}}}},
			"find tasks {holders.…:$exists,run_at:$lte,status} sort{priority}"},
		{bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "a"}}}, {Key: "u", Value: bson.D{{Key: "$unset", Value: bson.D{{Key: "x", Value: 1}}}}}},
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "b"}}}, {Key: "u", Value: bson.D{{Key: "$unset", Value: bson.D{{Key: "x", Value: 1}}}}}},
		}}}, "update tasks x2 {_id} u{$unset}"},
		{bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$match", Value: bson.D{{Key: "run_at", Value: lte}}}}, bson.D{{Key: "$limit", Value: 1}}}}},
			"aggregate tasks [$match {run_at:$lte}, 2 stages]"},
		{bson.D{{Key: "aggregate", Value: "tasks"}, {Key: "pipeline", Value: "not an array"}}, "aggregate tasks []"},
		{bson.D{{Key: "update", Value: "tasks"}, {Key: "updates", Value: 7}}, "update tasks"},
		{bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: 7}}, "find tasks {} sort{}"},
	} {
		if got := report.kindOf(msg(c.body)); got != c.want {
			t.Errorf("kind of %v = %q, want %q", c.body, got, c.want)
		}
	}
	if got := (&lockReport{}).kindOf(msg(bson.D{{Key: "find", Value: "tasks"}, {Key: "filter", Value: bson.D{{Key: "a", Value: 1}}}})); got != "find tasks" {
		t.Errorf("without shapes: kind %q, want %q", got, "find tasks")
	}
}
