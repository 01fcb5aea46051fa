package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is everything one run measured.
type report struct {
	Started  time.Time
	Wall     time.Duration
	Go       string
	Platform string
	CPUs     int
	Server   string
	Flags    string
	Capacity int

	EndToEnd []endToEnd
	Publish  publishResult
	Latency  latencyResult
	Memory   memoryResult
	Idle     idleResult
}

func newReport(cfg config, server string) *report {
	return &report{
		Started:  time.Now(),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:     runtime.NumCPU(),
		Server:   server,
		Flags:    cfg.flags(),
		Capacity: cfg.Capacity,
	}
}

// endToEnd is one consumer count: the library and the raw loop.
type endToEnd struct {
	Workers      int
	Raw, Library runStats
}

// runStats is one end-to-end run: publish the tasks, then drain them.
type runStats struct {
	Tasks     int
	Succeeded int
	Problems  int           // library events failed, error, lease_lost, expired
	Reruns    int           // library runs beyond one per task: work done again
	Publish   time.Duration // publishing every task
	Drain     time.Duration // from the consumers' start to the last success
	CPU       time.Duration // user+system of this process over both; -1 unknown
	Commands  map[string]int64
	Times     map[string]time.Duration // round trips by command name, summed
	// Statements are the statements of inserts, updates and deletes, by
	// command name.
	Statements map[string]int64
}

// add is the sum of two runs.
func (s runStats) add(t runStats) runStats {
	out := runStats{
		Tasks: s.Tasks + t.Tasks, Succeeded: s.Succeeded + t.Succeeded, Problems: s.Problems + t.Problems, Reruns: s.Reruns + t.Reruns,
		Publish: s.Publish + t.Publish, Drain: s.Drain + t.Drain, CPU: s.CPU + t.CPU,
		Commands: maps.Clone(s.Commands), Times: maps.Clone(s.Times),
	}
	if s.CPU < 0 || t.CPU < 0 {
		out.CPU = -1
	}
	if out.Commands == nil {
		out.Commands = map[string]int64{}
	}
	for name, n := range t.Commands {
		out.Commands[name] += n
	}
	out.Statements = maps.Clone(s.Statements)
	if out.Statements == nil {
		out.Statements = map[string]int64{}
	}
	for name, n := range t.Statements {
		out.Statements[name] += n
	}
	if out.Times == nil {
		out.Times = map[string]time.Duration{}
	}
	for name, d := range t.Times {
		out.Times[name] += d
	}
	return out
}

func (s runStats) total() time.Duration { return s.Publish + s.Drain }

func (s runStats) tasksPerSec() float64 { return perSecond(s.Succeeded, s.total()) }

func (s runStats) drainPerSec() float64 { return perSecond(s.Succeeded, s.Drain) }

func (s runStats) commandsPerTask() float64 {
	var n int64
	for _, c := range s.Commands {
		n += c
	}
	return float64(n) / float64(s.Succeeded)
}

// besidesInserts is commands per task other than inserts (the publish,
// and the history records, written a batch at a time): claims, pings, run
// ends and every poll, sweep and read around them.
func (s runStats) besidesInserts() float64 {
	return s.commandsPerTask() - perTask(s, "insert")
}

// writeCommands are the commands that count as writes.
var writeCommands = []string{"insert", "update", "findAndModify", "delete"}

func (s runStats) writesPerTask() float64 {
	var n int64
	for _, name := range writeCommands {
		n += s.Commands[name]
	}
	return float64(n) / float64(s.Succeeded)
}

// cpuPer1000 is the CPU time per 1,000 tasks, or -1.
func (s runStats) cpuPer1000() time.Duration {
	if s.CPU < 0 || s.Succeeded == 0 {
		return -1
	}
	return time.Duration(float64(s.CPU) * 1000 / float64(s.Succeeded))
}

func cpuSince(start time.Duration, ok bool) time.Duration {
	now, nowOK := cpuTime()
	if !ok || !nowOK {
		return -1
	}
	return now - start
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return float64(n) / d.Seconds()
}

// percentile is the nearest-rank p-th percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Sorted(slices.Values(ds))
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// ---- Printing ----

// row is one figure: the library's, the raw limit's, and their ratio.
type row struct {
	name     string
	lib, raw string
	ratio    float64 // NaN: none
	better   string  // "higher" or "lower"
}

type section struct {
	title string
	rows  []row
}

func (r *report) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("\nmscheduler benchmark\n")
	p("  date     %s\n", r.Started.UTC().Format("2006-01-02 15:04:05 UTC"))
	p("  go       %s %s, %d CPUs\n", r.Go, r.Platform, r.CPUs)
	p("  server   %s\n", r.Server)
	p("  flags    %s\n", r.Flags)
	p("  wall     %s\n\n", r.Wall.Round(100*time.Millisecond))

	const format = "  %-52s %23s %16s %8s  %s\n"
	p(format, "figure", "library", "raw limit", "lib/raw", "better")
	for _, s := range r.sections() {
		p("  %s\n", s.title)
		for _, rw := range s.rows {
			ratio := "-"
			if !math.IsNaN(rw.ratio) && !math.IsInf(rw.ratio, 0) {
				ratio = fmt.Sprintf("%.2f", rw.ratio)
			}
			p(format, "  "+rw.name, rw.lib, rw.raw, ratio, rw.better)
		}
	}
	p("  lib/raw is the library's figure over the raw loop's; \"better\" says which way is good.\n")
	r.printCommandNames(w)
	if len(r.Idle.Poll) > 0 {
		r.printIdleCommandNames(w)
	}
	p("\n%s\n", r.checksLine())
	p("\n%s\n", r.targetLine())
}

// checksLine says what the end-to-end runs verified besides timing.
func (r *report) checksLine() string {
	var lib, raw, problems, reruns int
	for _, x := range r.EndToEnd {
		lib += x.Library.Succeeded
		raw += x.Raw.Succeeded
		problems += x.Library.Problems
		reruns += x.Library.Reruns
	}
	return fmt.Sprintf("checks: %d library and %d raw tasks succeeded, every one of each run, and the documents agree; "+
		"library events failed, error, lease_lost or expired: %d; library runs beyond one per task (work done again): %d", lib, raw, problems, reruns)
}

func (r *report) sections() []section {
	var e2e, drain, cmds, besides, writes, cpu section
	e2e.title = "end to end: publish one by one, then drain (tasks/s)"
	drain.title = "drain only: claim, no-op handler, complete (tasks/s)"
	cmds.title = "commands per task (publish, claim, complete and everything else)"
	besides.title = "commands per task besides inserts (claim, ping, run end, polls and sweeps)"
	writes.title = "writes per task (insert, update, findAndModify, delete)"
	cpu.title = "client CPU per 1,000 tasks, end to end (this process: includes the producer)"
	for _, x := range r.EndToEnd {
		name := fmt.Sprintf("W=%d consumers × %d slots", x.Workers, r.Capacity)
		lib, raw := x.Library, x.Raw
		e2e.rows = append(e2e.rows, rateRow(name, lib.tasksPerSec(), raw.tasksPerSec()))
		drain.rows = append(drain.rows, rateRow(name, lib.drainPerSec(), raw.drainPerSec()))
		cmds.rows = append(cmds.rows, countRow(name, lib.commandsPerTask(), raw.commandsPerTask()))
		besides.rows = append(besides.rows, countRow(name, lib.besidesInserts(), raw.besidesInserts()))
		writes.rows = append(writes.rows, countRow(name, lib.writesPerTask(), raw.writesPerTask()))
		cpu.rows = append(cpu.rows, row{name, fmtCPU(lib.cpuPer1000()), fmtCPU(raw.cpuPer1000()),
			ratioOf(float64(lib.cpuPer1000()), float64(raw.cpuPer1000())), "lower"})
	}
	out := []section{e2e, drain, cmds, besides, writes, cpu, r.publishSection(), r.latencySection(), r.memorySection()}
	if len(r.Idle.Poll) > 0 {
		out = append(out, r.idleSection())
	}
	return out
}

func (r *report) publishSection() section {
	pr := r.Publish
	rate := func(d time.Duration) float64 { return perSecond(pr.Tasks*pr.Rounds, d) }
	return section{
		title: fmt.Sprintf("publishing %d new tasks into an empty collection, %d rounds (tasks/s)", pr.Tasks, pr.Rounds),
		rows: []row{
			rateRow("Publish one by one vs insertOne", rate(pr.OneByOne), rate(pr.RawInsertOne)),
			rateRow("Publish one by one vs the same upserts one by one", rate(pr.OneByOne), rate(pr.RawUpsertOne)),
			rateRow(fmt.Sprintf("PublishMany, batches of %d vs insertMany", pr.Batch), rate(pr.Many), rate(pr.RawInsertMany)),
			rateRow("PublishMany vs bulkWrite of the same upserts", rate(pr.Many), rate(pr.RawUpsertMany)),
		},
	}
}

func (r *report) latencySection() section {
	l := r.Latency
	raw50, raw99 := percentile(l.Raw, 50), percentile(l.Raw, 99)
	latRow := func(name string, ds []time.Duration, p float64, raw time.Duration) row {
		if ds == nil {
			return row{name, l.StreamNA, fmtDuration(raw), math.NaN(), "lower"}
		}
		v := percentile(ds, p)
		return row{name, fmtDuration(v), fmtDuration(raw), ratioOf(float64(v), float64(raw)), "lower"}
	}
	return section{
		title: fmt.Sprintf("publish-to-start latency: %d tasks at %g/s, %d waiting consumers (raw: insert, then claim at once)",
			l.Tasks, l.Rate, l.Workers),
		rows: []row{
			latRow("polling (default PollInterval) p50", l.Poll, 50, raw50),
			latRow("polling (default PollInterval) p99", l.Poll, 99, raw99),
			latRow("change streams p50", l.Stream, 50, raw50),
			latRow("change streams p99", l.Stream, 99, raw99),
		},
	}
}

func (r *report) memorySection() section {
	m := r.Memory
	memRow := func(name string, lib, raw int64) row {
		ratio := math.NaN()
		if lib != rssUnknown && raw != rssUnknown {
			ratio = ratioOf(float64(lib), float64(raw))
		}
		return row{name, fmtRSS(lib), fmtRSS(raw), ratio, "lower"}
	}
	return section{
		title: "worker RSS, separate process (raw: a client polling the raw claim)",
		rows: []row{
			memRow("idle, empty collection", m.LibIdle, m.RawIdle),
			memRow(fmt.Sprintf("idle, %d tasks not yet due", m.Pending), m.LibPending, m.RawPending),
		},
	}
}

// printCommandNames prints commands per task by name, library and raw, for
// each consumer count, then the round-trip time they took per task.
func (r *report) printCommandNames(w io.Writer) {
	names := map[string]bool{}
	for _, x := range r.EndToEnd {
		for n := range x.Library.Commands {
			names[n] = true
		}
		for n := range x.Raw.Commands {
			names[n] = true
		}
	}
	r.printByName(w, "commands per task by name", names, func(s runStats, n string) string {
		return fmt.Sprintf("%.3f", perTask(s, n))
	})
	batched := map[string]bool{}
	for n := range names {
		if _, ok := statementArrays[n]; ok {
			batched[n] = true
		}
	}
	r.printByName(w, "statements per command (how large the batches were)", batched, func(s runStats, n string) string {
		if s.Commands[n] == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(s.Statements[n])/float64(s.Commands[n]))
	})
	r.printByName(w, "round-trip ms per task by name (as the client saw it: includes waiting for the server)", names,
		func(s runStats, n string) string {
			return fmt.Sprintf("%.2f", float64(s.Times[n])/float64(time.Millisecond)/float64(s.Succeeded))
		})
}

func (r *report) printByName(w io.Writer, title string, names map[string]bool, cell func(runStats, string) string) {
	fmt.Fprintf(w, "\n  %s\n  %-20s", title, "")
	for _, x := range r.EndToEnd {
		fmt.Fprintf(w, " %8s %8s", fmt.Sprintf("lib W=%d", x.Workers), fmt.Sprintf("raw W=%d", x.Workers))
	}
	fmt.Fprintln(w)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(w, "    %-18s", n)
		for _, x := range r.EndToEnd {
			fmt.Fprintf(w, " %8s %8s", cell(x.Library, n), cell(x.Raw, n))
		}
		fmt.Fprintln(w)
	}
}

func perTask(s runStats, name string) float64 {
	return float64(s.Commands[name]) / float64(s.Succeeded)
}

func rateRow(name string, lib, raw float64) row {
	return row{name, fmt.Sprintf("%.1f", lib), fmt.Sprintf("%.1f", raw), ratioOf(lib, raw), "higher"}
}

func countRow(name string, lib, raw float64) row {
	return row{name, fmt.Sprintf("%.3f", lib), fmt.Sprintf("%.3f", raw), ratioOf(lib, raw), "lower"}
}

func ratioOf(lib, raw float64) float64 {
	if lib < 0 || raw <= 0 {
		return math.NaN()
	}
	return lib / raw
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "n/a"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
}

func fmtCPU(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func fmtRSS(kb int64) string {
	if kb == rssUnknown {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MB", float64(kb)/1024)
}

// ---- Targets ----

type target struct {
	name  string
	value string
	met   bool
}

func (r *report) targets() []target {
	var out []target
	if len(r.EndToEnd) == 0 {
		return r.idleTargets()
	}
	maxCmds, maxCmdsW := 0.0, 0
	maxBesides, maxBesidesW := 0.0, 0
	best, bestW := 0.0, 0
	for _, x := range r.EndToEnd {
		if v := x.Library.commandsPerTask(); v > maxCmds {
			maxCmds, maxCmdsW = v, x.Workers
		}
		if v := x.Library.besidesInserts(); v > maxBesides {
			maxBesides, maxBesidesW = v, x.Workers
		}
		if v := x.Library.tasksPerSec(); v > best {
			best, bestW = v, x.Workers
		}
	}
	worst, worstW := r.worstRatio(1, runStats.tasksPerSec) // end to end against raw: the worst consumer count
	out = append(out, target{"end to end >= 70% of raw", fmt.Sprintf("%.2f at worst (W=%d)", worst, worstW), worst >= 0.7})

	bulk := ratioOf(r.Publish.RawInsertMany.Seconds(), r.Publish.Many.Seconds())
	out = append(out, target{"PublishMany >= 80% of insertMany", fmt.Sprintf("%.2f", bulk), bulk >= 0.8})

	out = append(out, target{"commands/task <= 3", fmt.Sprintf("%.2f at most (W=%d)", maxCmds, maxCmdsW), maxCmds <= 3})
	out = append(out, target{"commands/task besides inserts <= 0.5", fmt.Sprintf("%.2f at most (W=%d)", maxBesides, maxBesidesW), maxBesides <= 0.5})

	idle := r.Memory.LibIdle
	out = append(out, target{"idle worker RSS < 30 MB", fmtRSS(idle), idle != rssUnknown && idle < 30*1024})

	// The raw loop's own scaling over the same consumer counts says how
	// much of a drop is the server's.
	largest := slices.MaxFunc(r.EndToEnd, func(a, b endToEnd) int { return a.Workers - b.Workers })
	scale := largest.Library.tasksPerSec() / best
	rawBest := 0.0
	for _, x := range r.EndToEnd {
		rawBest = max(rawBest, x.Raw.tasksPerSec())
	}
	out = append(out, target{fmt.Sprintf("W=%d >= 80%% of best", largest.Workers),
		fmt.Sprintf("%.2f of W=%d (raw loop: %.2f of its best)", scale, bestW, largest.Raw.tasksPerSec()/rawBest), scale >= 0.8})
	out = append(out, r.throughputTargets()...)
	return append(out, r.idleTargets()...)
}

// throughputTargets are the targets of batched claims, pings and run ends:
// with several slots and W >= 4, 3x the raw loop (end to end, and the
// drain alone, since publishing one by one costs both sides the same);
// with one slot, 0.9x.
func (r *report) throughputTargets() []target {
	if r.Capacity == 1 {
		worst, w := r.worstRatio(1, runStats.tasksPerSec)
		return []target{{"one slot, end to end >= 0.9x raw", fmt.Sprintf("%.2f at worst (W=%d)", worst, w), worst >= 0.9}}
	}
	var out []target
	if worst, w := r.worstRatio(4, runStats.tasksPerSec); w > 0 {
		out = append(out, target{"end to end >= 3x raw at W >= 4", fmt.Sprintf("%.2f at worst (W=%d)", worst, w), worst >= 3})
	}
	if worst, w := r.worstRatio(4, runStats.drainPerSec); w > 0 {
		out = append(out, target{"drain >= 3x raw at W >= 4", fmt.Sprintf("%.2f at worst (W=%d)", worst, w), worst >= 3})
	}
	return out
}

// worstRatio is the lowest ratio of rate, library to raw, over the consumer
// counts of at least minWorkers, and its W (0 when there is none).
func (r *report) worstRatio(minWorkers int, rate func(runStats) float64) (float64, int) {
	worst, worstW := math.Inf(1), 0
	for _, x := range r.EndToEnd {
		if x.Workers < minWorkers {
			continue
		}
		if v := ratioOf(rate(x.Library), rate(x.Raw)); v < worst {
			worst, worstW = v, x.Workers
		}
	}
	return worst, worstW
}

func (r *report) targetLine() string {
	ts := r.targets()
	parts := make([]string, len(ts))
	met := 0
	for i, t := range ts {
		verdict := "MISSED"
		if t.met {
			verdict = "met"
			met++
		}
		parts[i] = fmt.Sprintf("%s: %s, %s", t.name, t.value, verdict)
	}
	return fmt.Sprintf("targets (%d of %d met): %s", met, len(ts), strings.Join(parts, "; "))
}
