// Command bench measures mscheduler against a plain driver loop doing the
// same writes per task, on the same server in the same run, and prints every
// figure with its ratio to that raw limit.
//
//	go run ./examples/bench [flags]
//	MONGODB_URI=mongodb://host/?replicaSet=rs0 go run ./examples/bench -tasks 5000 -capacity 10
//
// Unless MONGODB_URI points at a server it starts the development server
// (worker/devserver): FerretDB behind a front that serializes commands,
// which scans the whole collection for every query and update that is not
// by _id alone, so that a command costs about half a millisecond per
// document in the collection. Its absolute speed says little about the
// library; the ratios measured in the same run are what count. The defaults
// are sized for it (about four minutes on 2 cores, two of them the idle
// phase's settle and count windows): few tasks per run, and 4 slots per
// consumer so that even 8 consumers have fewer slots than tasks. Against a
// real server, raise -tasks.
//
// Phases, each on a fresh collection of the database "mscheduler_bench"
// (dropped at the start and at the end; each collection is dropped once
// its phase is done with it):
//
//  1. end to end, for each -workers W: publish -tasks tasks one by one, then
//     W consumers (each its own client, its own worker id, all started at
//     once) of -capacity slots run a no-op handler until every task has
//     succeeded. The raw
//     limit inserts one document per task (a copy of one the library
//     wrote), then W×capacity goroutines claim with findOneAndUpdate and
//     complete with an update fenced on the run id. Each side runs -rounds
//     times, alternating which goes first. Commands (by name) and this
//     process's CPU time are counted for both;
//  2. publishing: Publish one by one and PublishMany in batches, against
//     insertOne and insertMany, and against the same upserts sent raw;
//  3. publish-to-start latency while consumers wait, polling (default
//     PollInterval) and, where the server has them, with change streams,
//     against an insert followed at once by a claim;
//  4. the resident memory of an idle worker process (this binary run
//     again), with an empty collection and with -mem-pending tasks not yet
//     due, against a process that polls with the raw claim;
//  5. the cost of waiting, for each -idle N: one client serving N empty
//     collections, a consumer of Capacity 4 on each (polling, and with
//     change streams where the server has them), settles for -idle-settle,
//     then the commands it sends over -idle-window are counted by name.
//     The raw limit, beside it on a client of its own, polls each
//     collection with one find per default PollInterval.
//
// The last line states the targets and whether each was met. A missed
// target is reported, not an error: the exit status is non-zero only when
// the benchmark itself fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

const database = "mscheduler_bench"

// config sizes a run. The defaults finish in about four minutes on the
// development server on a 2-core machine.
type config struct {
	// URI of the server; empty means MONGODB_URI, and if that is unset too,
	// the development server.
	URI string

	Tasks    int   // end to end: tasks per run
	Rounds   int   // end to end: runs per consumer count and side, alternating
	Workers  []int // end to end: consumer counts to run
	Capacity int   // slots per consumer

	Publish int // publishing: tasks per method
	Batch   int // publishing: PublishMany and insertMany batch size

	Latency        int     // latency: tasks per mode
	Rate           float64 // latency: tasks published per second
	LatencyWorkers int     // latency: waiting consumers

	MemPending int           // memory: not-yet-due tasks in the second measurement
	MemSettle  time.Duration // memory: how long the worker runs before it is measured

	IdleCollections []int         // idle: counts of idle collections to measure
	IdleSettle      time.Duration // idle: how long the consumers run before counting
	IdleWindow      time.Duration // idle: how long commands are counted

	Stall time.Duration // a phase with no progress for this long fails

	// SpareFor is the consumers' ClaimSpareFor in the end-to-end phase:
	// zero for the library's default, negative for none.
	SpareFor time.Duration

	// ServerDelay, when set, is a delay every command of both sides is
	// held for on its way to the server, by a proxy in front of it (see
	// mschedulertest.ParseDelay: "1s", "300ms-800ms", "0s..2s/1m").
	ServerDelay string

	// Progress receives one line per step; nil discards them.
	Progress io.Writer
}

func defaultConfig() config {
	return config{
		Tasks:           60,
		Rounds:          2,
		Workers:         []int{1, 2, 4, 8},
		Capacity:        4,
		Publish:         200,
		Batch:           100,
		Latency:         40,
		Rate:            10,
		LatencyWorkers:  2,
		MemPending:      10000,
		MemSettle:       2 * time.Second,
		IdleCollections: []int{1, 10, 50},
		IdleSettle:      10 * time.Second,
		IdleWindow:      30 * time.Second,
		Stall:           time.Minute,
	}
}

// flags is the configuration as command-line flags, for the report header.
func (c config) flags() string {
	return fmt.Sprintf("-tasks %d -rounds %d -workers %s -capacity %d -publish %d -batch %d -latency %d -rate %g "+
		"-latency-workers %d -mem-pending %d -mem-settle %s -idle %s -idle-settle %s -idle-window %s "+
		"-stall %s -claim-spare-for %s -server-delay %q",
		c.Tasks, c.Rounds, joinCounts(c.Workers), c.Capacity, c.Publish, c.Batch, c.Latency, c.Rate,
		c.LatencyWorkers, c.MemPending, c.MemSettle, joinCounts(c.IdleCollections), c.IdleSettle, c.IdleWindow,
		c.Stall, c.SpareFor, c.ServerDelay)
}

func joinCounts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (c config) validate() error {
	switch {
	case c.Tasks < 1, c.Rounds < 1, c.Capacity < 1, c.Publish < 1, c.Batch < 1, c.Latency < 1, c.LatencyWorkers < 1:
		return fmt.Errorf("-tasks, -rounds, -capacity, -publish, -batch, -latency and -latency-workers must be at least 1")
	case len(c.Workers) == 0:
		return fmt.Errorf("-workers must name at least one consumer count")
	case c.Rate <= 0:
		return fmt.Errorf("-rate must be positive")
	case c.MemPending < 0:
		return fmt.Errorf("-mem-pending must not be negative")
	case c.Stall <= 0:
		return fmt.Errorf("-stall must be positive")
	case len(c.IdleCollections) == 0:
		return fmt.Errorf("-idle must name at least one count of collections")
	case c.IdleSettle < 0:
		return fmt.Errorf("-idle-settle must not be negative")
	case c.IdleWindow <= 0:
		return fmt.Errorf("-idle-window must be positive")
	}
	if c.ServerDelay != "" {
		if _, err := mschedulertest.ParseDelay(c.ServerDelay); err != nil {
			return fmt.Errorf("-server-delay: %w", err)
		}
	}
	for _, w := range c.Workers {
		if w < 1 {
			return fmt.Errorf("-workers: %d is not a consumer count", w)
		}
	}
	for _, n := range c.IdleCollections {
		if n < 1 {
			return fmt.Errorf("-idle: %d is not a count of collections", n)
		}
	}
	return nil
}

func parseFlags(args []string) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&cfg.Tasks, "tasks", cfg.Tasks, "end to end: tasks per run")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "end to end: runs of each side per consumer count, in the order raw, library, library, raw, ...")
	workers := fs.String("workers", joinCounts(cfg.Workers), "end to end: comma-separated consumer counts")
	fs.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "slots per consumer (the raw loop runs workers×capacity goroutines)")
	fs.IntVar(&cfg.Publish, "publish", cfg.Publish, "publishing: tasks per method")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "publishing: PublishMany and insertMany batch size")
	fs.IntVar(&cfg.Latency, "latency", cfg.Latency, "latency: tasks per mode")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "latency: tasks published per second")
	fs.IntVar(&cfg.LatencyWorkers, "latency-workers", cfg.LatencyWorkers, "latency: waiting consumers")
	fs.IntVar(&cfg.MemPending, "mem-pending", cfg.MemPending, "memory: not-yet-due tasks in the collection")
	fs.DurationVar(&cfg.MemSettle, "mem-settle", cfg.MemSettle, "memory: how long the worker runs before it is measured")
	idle := fs.String("idle", joinCounts(cfg.IdleCollections), "idle: comma-separated counts of idle collections, a consumer each")
	fs.DurationVar(&cfg.IdleSettle, "idle-settle", cfg.IdleSettle, "idle: how long the consumers run before their commands are counted")
	fs.DurationVar(&cfg.IdleWindow, "idle-window", cfg.IdleWindow, "idle: how long their commands are counted")
	fs.DurationVar(&cfg.Stall, "stall", cfg.Stall, "fail a phase that makes no progress for this long")
	fs.DurationVar(&cfg.SpareFor, "claim-spare-for", cfg.SpareFor, "end to end: the consumers' ClaimSpareFor (0: the library's default; negative: no spares)")
	fs.StringVar(&cfg.ServerDelay, "server-delay", "", `hold every command of both sides this long on its way to the server: "1s", a range "300ms-800ms", or growing "0s..2s/1m"`)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if cfg.Workers, err = parseCounts(*workers); err != nil {
		return cfg, fmt.Errorf("-workers: %w", err)
	}
	if cfg.IdleCollections, err = parseCounts(*idle); err != nil {
		return cfg, fmt.Errorf("-idle: %w", err)
	}
	return cfg, cfg.validate()
}

// parseCounts parses a comma-separated list of numbers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func main() {
	if isChild() {
		os.Exit(childMain())
	}
	cfg, err := parseFlags(os.Args[1:])
	if err == flag.ErrHelp {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	cfg.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
	rep.print(os.Stdout)
}

// run runs every phase and returns what was measured.
func run(ctx context.Context, cfg config) (*report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	env, err := openEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()

	rep := newReport(cfg, env.server)
	for _, w := range cfg.Workers {
		x, err := endToEndRounds(ctx, env, w)
		if err != nil {
			return nil, err
		}
		rep.EndToEnd = append(rep.EndToEnd, x)
	}
	if rep.Publish, err = publishPhase(ctx, env); err != nil {
		return nil, fmt.Errorf("publishing: %w", err)
	}
	if rep.Latency, err = latencyPhase(ctx, env); err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	if rep.Memory, err = memoryPhase(ctx, env); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	if rep.Idle, err = idlePhase(ctx, env); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	rep.Wall = time.Since(rep.Started)
	return rep, nil
}

// endToEndRounds runs the raw loop and the library cfg.Rounds times each
// with w workers, alternating which goes first (raw, library, library,
// raw, ...) so that a server that speeds up or slows down during the run
// favours neither, and adds the rounds up.
func endToEndRounds(ctx context.Context, env *env, w int) (endToEnd, error) {
	x := endToEnd{Workers: w}
	for r := range env.cfg.Rounds {
		sides := []func() error{
			func() error {
				s, err := rawEndToEnd(ctx, env, w, r)
				x.Raw = x.Raw.add(s)
				if err != nil {
					return fmt.Errorf("raw loop, %d workers: %w", w, err)
				}
				return nil
			},
			func() error {
				s, err := libraryEndToEnd(ctx, env, w, r)
				x.Library = x.Library.add(s)
				if err != nil {
					return fmt.Errorf("library, %d workers: %w", w, err)
				}
				return nil
			},
		}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return x, err
			}
		}
	}
	return x, nil
}
