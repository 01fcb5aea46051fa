package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// idleTargetCollections is the count of collections the plan's targets
// for the cost of waiting speak of; they are judged where -idle has it.
const idleTargetCollections = 50

// The plan's bounds for idleTargetCollections idle collections, commands
// per second all together.
const (
	idleTargetPolling = 10
	idleTargetStreams = 2
)

func (r *report) idleSection() section {
	i := r.Idle
	s := section{title: fmt.Sprintf("the cost of waiting: N idle collections, a consumer each (Capacity %d), commands/s over %s "+
		"after %s (raw: a find per collection per PollInterval)", idleCapacity, i.Window, i.Settle)}
	add := func(mode string, counts []idleCount) {
		for _, c := range counts {
			name, n := fmt.Sprintf("N=%d, %s", c.Collections, mode), float64(c.Collections)
			s.rows = append(s.rows,
				idleRow(name+", all together", c.libPerSec(), c.rawPerSec()),
				idleRow(name+", per collection", c.libPerSec()/n, c.rawPerSec()/n))
		}
	}
	add("polling", i.Poll)
	if i.Stream == nil {
		s.rows = append(s.rows, row{"change streams", i.StreamNA, "-", math.NaN(), "lower"})
	}
	add("change streams", i.Stream)
	return s
}

func idleRow(name string, lib, raw float64) row {
	return row{name, fmt.Sprintf("%.2f", lib), fmt.Sprintf("%.2f", raw), ratioOf(lib, raw), "lower"}
}

// printIdleCommandNames prints the idle commands per second by name, all
// collections together: the library's and the raw poller's while polling,
// and the library's with change streams.
func (r *report) printIdleCommandNames(w io.Writer) {
	type column struct {
		title  string
		counts map[string]int64
		c      idleCount
	}
	var cols []column
	for _, c := range r.Idle.Poll {
		cols = append(cols, column{fmt.Sprintf("lib N=%d", c.Collections), c.Library, c},
			column{fmt.Sprintf("raw N=%d", c.Collections), c.Raw, c})
	}
	for _, c := range r.Idle.Stream {
		cols = append(cols, column{fmt.Sprintf("cs N=%d", c.Collections), c.Library, c})
	}
	names := map[string]bool{}
	for _, col := range cols {
		for n := range col.counts {
			names[n] = true
		}
	}
	fmt.Fprintf(w, "\n  idle commands per second by name, all collections together (lib and raw: polling; cs: the library with change streams)\n  %-20s", "")
	for _, col := range cols {
		fmt.Fprintf(w, " %9s", col.title)
	}
	fmt.Fprintln(w)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(w, "    %-18s", n)
		for _, col := range cols {
			fmt.Fprintf(w, " %9.2f", perSecondOf(col.counts[n], col.c.Window))
		}
		fmt.Fprintln(w)
	}
	warnSlowServer(w, "polling", r.Idle.Poll)
	warnSlowServer(w, "change streams", r.Idle.Stream)
}

// warnSlowServer names the windows in which the server did not keep up
// with the raw poller.
func warnSlowServer(w io.Writer, mode string, counts []idleCount) {
	for _, c := range counts {
		if share := c.rawShare(); share < idleKeptUp {
			fmt.Fprintf(w, "  N=%d, %s: the raw poller sent %.2f of its finds: the server did not keep up, and both sides' figures are bound by it\n",
				c.Collections, mode, share)
		}
	}
}

// idleKeptUp is the share of its ticker's finds the raw poller must send
// for a window to count as one the server kept up with: a few may fall
// outside the window at its edges.
const idleKeptUp = 0.9

// idleTargets are the plan's bounds on the cost of waiting at 50 idle
// collections: at most 10 commands per second without change streams, and
// at most 2 with them, each where it was measured.
func (r *report) idleTargets() []target {
	var out []target
	check := func(mode string, counts []idleCount, bound float64) {
		i := slices.IndexFunc(counts, func(c idleCount) bool { return c.Collections == idleTargetCollections })
		if i < 0 {
			return
		}
		v := counts[i].libPerSec()
		out = append(out, target{fmt.Sprintf("%d idle collections <= %g commands/s %s", idleTargetCollections, bound, mode),
			fmt.Sprintf("%.1f/s (%.2f per collection)", v, v/idleTargetCollections), v <= bound})
	}
	check("without change streams", r.Idle.Poll, idleTargetPolling)
	check("with change streams", r.Idle.Stream, idleTargetStreams)
	return out
}
