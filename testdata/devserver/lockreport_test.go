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
	t.Setenv(envLockReport, "soon")
	if _, err = parseFlags([]string{"-dir", t.TempDir()}); err == nil || !strings.Contains(err.Error(), envLockReport) {
		t.Errorf("$%s=soon gave %v, want an error naming it", envLockReport, err)
	}
}
