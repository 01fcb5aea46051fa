package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the memory phase run this test binary as its worker
// process, as it runs the command's binary.
func TestMain(m *testing.M) {
	if isChild() {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// TestTinyRun runs every phase at a tiny size and checks that the counts
// agree. It asserts nothing about speed.
func TestTinyRun(t *testing.T) {
	cfg := defaultConfig()
	cfg.Tasks = 20
	cfg.Rounds = 2
	cfg.Workers = []int{1, 2}
	cfg.Capacity = 3
	cfg.Publish = 30
	cfg.Batch = 10
	cfg.Latency = 5
	cfg.Rate = 20
	cfg.LatencyWorkers = 1
	cfg.MemPending = 100
	cfg.MemSettle = 100 * time.Millisecond
	cfg.IdleCollections = []int{1, 2}
	cfg.IdleSettle, cfg.IdleWindow = time.Second, time.Second
	cfg.Progress = testWriter{t}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	if len(rep.EndToEnd) != len(cfg.Workers) {
		t.Fatalf("%d end-to-end results, want %d", len(rep.EndToEnd), len(cfg.Workers))
	}
	for _, x := range rep.EndToEnd {
		for name, s := range map[string]runStats{"library": x.Library, "raw": x.Raw} {
			if want := cfg.Tasks * cfg.Rounds; s.Succeeded != want || s.Tasks != want {
				t.Errorf("W=%d %s: %d of %d tasks succeeded, want %d", x.Workers, name, s.Succeeded, s.Tasks, want)
			}
			if s.Problems != 0 {
				t.Errorf("W=%d %s: %d failed, error or lost-lease events", x.Workers, name, s.Problems)
			}
			for what, v := range map[string]float64{"commands": s.commandsPerTask(), "writes": s.writesPerTask(), "tasks/s": s.tasksPerSec()} {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("W=%d %s: %s per task is %v, want a positive finite number", x.Workers, name, what, v)
				}
			}
			// The raw loop writes each task three times: insert, claim,
			// completion. The library publishes one by one too, and its
			// claims and run ends come on top, several in one command
			// when they are batched.
			if w := s.writesPerTask(); name == "raw" && w < 3 || w <= 1 {
				t.Errorf("W=%d %s: %.2f writes per task, want at least 3 (raw) or more than 1 (library)", x.Workers, name, w)
			}
		}
	}
	for name, d := range map[string]time.Duration{
		"Publish": rep.Publish.OneByOne, "PublishMany": rep.Publish.Many, "insertOne": rep.Publish.RawInsertOne, "upsert": rep.Publish.RawUpsertOne,
		"insertMany": rep.Publish.RawInsertMany, "bulk upsert": rep.Publish.RawUpsertMany,
	} {
		if d <= 0 {
			t.Errorf("publishing with %s took %v", name, d)
		}
	}
	l := rep.Latency
	if len(l.Poll) != cfg.Latency || len(l.Raw) != cfg.Latency {
		t.Errorf("latency: %d polling and %d raw samples, want %d each", len(l.Poll), len(l.Raw), cfg.Latency)
	}
	if (l.Stream == nil) == (l.StreamNA == "") || (l.Stream != nil && len(l.Stream) != cfg.Latency) {
		t.Errorf("latency: %d change-stream samples and n/a %q: want %d samples or a reason", len(l.Stream), l.StreamNA, cfg.Latency)
	}
	m := rep.Memory
	for name, kb := range map[string]int64{"library idle": m.LibIdle, "library pending": m.LibPending, "raw idle": m.RawIdle, "raw pending": m.RawPending} {
		if kb != rssUnknown && kb <= 0 {
			t.Errorf("memory: %s RSS %d kB", name, kb)
		}
	}

	checkIdle(t, rep.Idle, cfg)

	var out bytes.Buffer
	rep.print(&out)
	text := out.String()
	for _, want := range []string{"server", "flags", "end to end", "commands per task by name", "targets (", "latency", "RSS",
		"the cost of waiting", "N=1, polling, all together", "N=1, polling, per collection",
		"N=2, polling, all together", "N=2, polling, per collection", "idle commands per second by name", "lib N=2", "raw N=2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "NaN") {
		t.Errorf("the report has NaN:\n%s", text)
	}
	t.Log("\n" + text)
}

// checkIdle checks that the idle phase counted a window of every count of
// collections, polling, and with change streams or a reason why not.
func checkIdle(t *testing.T, idle idleResult, cfg config) {
	t.Helper()
	check := func(mode string, counts []idleCount) {
		if len(counts) != len(cfg.IdleCollections) {
			t.Errorf("idle, %s: %d results, want %d", mode, len(counts), len(cfg.IdleCollections))
			return
		}
		for i, c := range counts {
			if c.Collections != cfg.IdleCollections[i] || c.Window < cfg.IdleWindow || c.Library == nil || c.Raw == nil {
				t.Errorf("idle, %s: result %d is %d collections counted over %s (library %v, raw %v); want %d over at least %s",
					mode, i, c.Collections, c.Window, c.Library, c.Raw, cfg.IdleCollections[i], cfg.IdleWindow)
			}
		}
	}
	check("polling", idle.Poll)
	if (idle.Stream == nil) == (idle.StreamNA == "") {
		t.Errorf("idle: %d change-stream results and n/a %q: want results or a reason", len(idle.Stream), idle.StreamNA)
	}
	if idle.Stream != nil {
		check("change streams", idle.Stream)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestTinyRunThroughASlowServer runs the phases with every command held
// a few milliseconds by a proxy (-server-delay): both sides finish every
// task, and the library does no run twice.
func TestTinyRunThroughASlowServer(t *testing.T) {
	cfg := defaultConfig()
	cfg.Tasks, cfg.Rounds, cfg.Workers, cfg.Capacity = 10, 1, []int{2}, 3
	cfg.Publish, cfg.Batch, cfg.Latency, cfg.Rate, cfg.LatencyWorkers = 10, 5, 3, 20, 1
	cfg.MemPending, cfg.MemSettle = 10, 100*time.Millisecond
	cfg.IdleCollections, cfg.IdleSettle, cfg.IdleWindow = []int{1}, 500*time.Millisecond, 500*time.Millisecond
	cfg.ServerDelay = "5ms-15ms"
	cfg.Progress = testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rep.EndToEnd {
		if x.Library.Succeeded != cfg.Tasks || x.Raw.Succeeded != cfg.Tasks || x.Library.Problems != 0 || x.Library.Reruns != 0 {
			t.Errorf("W=%d: library %d succeeded (%d problems, %d run again), raw %d; want %d each, none again",
				x.Workers, x.Library.Succeeded, x.Library.Problems, x.Library.Reruns, x.Raw.Succeeded, cfg.Tasks)
		}
	}
	if !strings.Contains(rep.Flags, `-server-delay "5ms-15ms"`) {
		t.Errorf("the report's flags do not say the delay: %s", rep.Flags)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-tasks", "7", "-workers", "1, 3", "-capacity", "2", "-idle", "2,5", "-idle-window", "3s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tasks != 7 || len(cfg.Workers) != 2 || cfg.Workers[1] != 3 || cfg.Capacity != 2 ||
		!slices.Equal(cfg.IdleCollections, []int{2, 5}) || cfg.IdleWindow != 3*time.Second || cfg.IdleSettle != 10*time.Second {
		t.Errorf("parsed %+v", cfg)
	}
	for _, want := range []string{"-workers 1,3", "-idle 2,5 -idle-settle 10s -idle-window 3s"} {
		if !strings.Contains(cfg.flags(), want) {
			t.Errorf("flags() = %q, want it to contain %q", cfg.flags(), want)
		}
	}
	for _, bad := range [][]string{{"-workers", "0"}, {"-workers", "x"}, {"-tasks", "0"}, {"-rate", "0"}, {"extra"},
		{"-idle", "0"}, {"-idle", "1,x"}, {"-idle-window", "0s"}, {"-idle-settle", "-1s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}
