package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// The front runs one command at a time, so the time each kind of command holds its lock is
// what that kind costs every client of the server. A lock report (-lock-report, or
// $MSCHEDULER_DEV_LOCK_REPORT) logs it per command name and collection at each interval, most
// costly first: where a busy server's time goes, which a client's own count of its commands
// cannot tell (a find that scans a large collection costs more than a getMore).

// lockReport sums the time commands held the front's lock, by kind.
type lockReport struct {
	shapes bool // kinds name the fields a command's filter tests (see commandShape); set before use

	mu    sync.Mutex // guards kinds
	kinds map[string]*lockKind
}

type lockKind struct {
	n    int
	held time.Duration
	// covered is the part of held that reads for change streams took.
	covered time.Duration
}

// add records one command of kind that held the lock for held, of which covered went to
// reads for change streams.
func (r *lockReport) add(kind string, held, covered time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kinds == nil {
		r.kinds = map[string]*lockKind{}
	}
	k := r.kinds[kind]
	if k == nil {
		k = &lockKind{}
		r.kinds[kind] = k
	}
	k.n++
	k.held += held
	k.covered += covered
}

// take returns the sums so far and starts afresh.
func (r *lockReport) take() map[string]*lockKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := r.kinds
	r.kinds = nil
	return kinds
}

// lockReportTop bounds the kinds one report line names.
const lockReportTop = 12

// line sums up kinds over span: the lock's busy share, then each kind's.
func lockReportLine(kinds map[string]*lockKind, span time.Duration) string {
	var busy time.Duration
	n := 0
	for _, k := range kinds {
		busy += k.held
		n += k.n
	}
	names := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(kinds[b].held, kinds[a].held), strings.Compare(a, b)) })
	var b strings.Builder
	fmt.Fprintf(&b, "lock held %.0f%% of %s, %d commands (%.1f/s):", 100*busy.Seconds()/span.Seconds(), span.Round(time.Second), n, float64(n)/span.Seconds())
	for i, name := range names {
		if i == lockReportTop {
			fmt.Fprintf(&b, " and %d kinds more", len(names)-i)
			break
		}
		k := kinds[name]
		fmt.Fprintf(&b, " %s %d× %s (%.1f ms each", name, k.n, k.held.Round(time.Millisecond), float64(k.held.Microseconds())/1000/float64(k.n))
		if k.covered > 0 {
			fmt.Fprintf(&b, ", streams' reads %s", k.covered.Round(time.Millisecond))
		}
		b.WriteString(");")
	}
	return b.String()
}

// run logs a report every interval until ctx is done.
func (r *lockReport) run(ctx context.Context, every time.Duration, logger *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if kinds := r.take(); len(kinds) > 0 {
				logger.Warn("front: " + lockReportLine(kinds, now.Sub(last)))
			}
			last = now
		}
	}
}

// kindOf is the kind of command req is: its name and collection (see commandName), and the shape
// of its filter when the report asks for shapes.
func (r *lockReport) kindOf(req []byte) string {
	if r.shapes {
		return commandName(req) + commandShape(req)
	}
	return commandName(req)
}

// kindByKey is a command's kind in the report: its name (see commandName), marked with how the
// front keyed it (see keyedwrites.go), if it did.
func kindByKey(name, how string) string {
	if how != notKeyed {
		return name + " (" + how + ")"
	}
	return name
}

// commandName names a command for the report: its name and the collection it names, if any. It
// reads the body's first fields only.
func commandName(req []byte) string {
	name, body := peekCommandName(req), peekBody(req)
	if name == "" {
		return "(not OP_MSG)"
	}
	field := name
	if name == "getMore" {
		field = "collection"
	}
	if coll, ok := body.Lookup(field).StringValueOK(); ok {
		return name + " " + coll
	}
	return name
}
