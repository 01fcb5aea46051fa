package histcheck

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// DefaultSlack is the slack the soak tests allow a run cut at its lease:
// a lease_until is a server time estimated by the worker that wrote it,
// and a lease is found lapsed by another worker's estimate of the server
// clock; both are measured from hello replies, each off by up to half its
// round trip through the development server's one-at-a-time front.
const DefaultSlack = 100 * time.Millisecond

// Run is one run as its handler logged it. Local retries call the handler
// again within the run: Start is the first call's start, End the last
// call's end.
type Run struct {
	Key, RunID, Worker string
	Start              time.Time
	// End is zero when the run's last handler call logged no end (its
	// worker was killed during it).
	End time.Time
}

// Record is a run as the task that ran it recorded it (its runs array).
type Record struct {
	Key, RunID, Worker string
	Outcome            string // succeeded, failed, expired, released, ...
	LeaseUntil         time.Time
	Finished           time.Time
}

// HistoryRecord is a run as the run history collection holds it.
type HistoryRecord struct {
	Key, RunID, Outcome string
}

// Input is what Check checks.
type Input struct {
	Runs    []Run
	Records []Record // every run record of the tasks checked
	History []HistoryRecord
	// Concurrency is each task's concurrency, by key: every key of Runs
	// needs one.
	Concurrency map[string]int
	// Slack is how far a run cut at its lease may overlap another run:
	// [DefaultSlack] in the soak tests. Runs that ended by themselves get
	// none.
	Slack time.Duration
}

// Violation is one thing the history should not hold.
type Violation struct {
	Key  string // the task's
	Text string
}

func (v Violation) String() string { return v.Text }

// Report is what Check found.
type Report struct {
	// Overlaps are the runs of one task by one worker that overlapped,
	// and the instants where more runs of a task than its concurrency
	// overlapped while their leases held; by task key.
	Overlaps []Violation
	// History are the recorded runs the history misses, holds twice or
	// holds otherwise, and the history records that match no recorded
	// run; by task key, then in the order of Records.
	History []Violation
	// Cut counts the runs cut at their lease (or their release).
	Cut int
	// MaxCutOverlap is the largest overlap of a cut run with a run that
	// took its task over its concurrency without the slack: how much of
	// the slack was used.
	MaxCutOverlap time.Duration
}

// OK says the report holds no violation.
func (r Report) OK() bool { return len(r.Overlaps) == 0 && len(r.History) == 0 }

// Check checks the runs for overlaps and the history against the records.
func Check(in Input) Report {
	var rep Report
	rep.Overlaps, rep.Cut, rep.MaxCutOverlap = checkOverlaps(in)
	rep.History = checkHistory(in)
	return rep
}

type interval struct {
	runID, worker string
	from, to      int64 // UnixNano
	cut           bool  // to is the run's lease_until (or release), not a logged end
}

func checkOverlaps(in Input) ([]Violation, int, time.Duration) {
	records := make(map[string]Record, len(in.Records))
	for _, r := range in.Records {
		records[r.RunID] = r
	}
	slack := int64(in.Slack)
	byKey := map[string][]interval{}
	cut := 0
	for _, r := range in.Runs {
		iv := interval{runID: r.RunID, worker: r.Worker, from: r.Start.UnixNano(), to: -1}
		if !r.End.IsZero() {
			iv.to = r.End.UnixNano()
		}
		rec, recorded := records[r.RunID]
		switch {
		case recorded && rec.Outcome == "expired":
			if lease := rec.LeaseUntil.UnixNano(); iv.to < 0 || lease < iv.to {
				iv.to, iv.cut = lease, true
			}
		case recorded && rec.Outcome == "released" && iv.to < 0:
			iv.to, iv.cut = rec.Finished.UnixNano(), true
		}
		if iv.to < 0 {
			continue // no known end: the caller reports the run lost
		}
		if iv.cut {
			cut++
		}
		byKey[r.Key] = append(byKey[r.Key], iv)
	}
	var out []Violation
	var worst time.Duration
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ivs := byKey[key]
		fail := func(format string, args ...any) {
			out = append(out, Violation{Key: key, Text: fmt.Sprintf(format, args...)})
		}
		limit := in.Concurrency[key]
		if limit < 1 {
			fail("task %s: %d runs, but no concurrency is known for it", key, len(ivs))
			continue
		}
		sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].from < ivs[j].from })
		for i, a := range ivs {
			// Later intervals that start before a ends (sorted by start).
			for _, b := range ivs[i+1:] {
				if b.from >= a.to {
					break
				}
				within := a.cut && a.to-b.from <= slack
				if a.worker == b.worker && !within {
					fail("task %s: worker %s ran runs %s and %s at once", key, a.worker, a.runID, b.runID)
				}
				// How far past its lease a cut run overlapped a run that
				// took the task over its concurrency.
				if a.cut && goingAt(ivs, b.from) > limit {
					worst = max(worst, time.Duration(a.to-b.from))
				}
			}
		}
		if peak, at, ids := peakOverlap(ivs, slack); peak > limit {
			fail("task %s (concurrency %d): %d runs at once at %s: %v", key, limit, peak, time.Unix(0, at).UTC().Format(time.RFC3339Nano), ids)
		}
	}
	return out, cut, worst
}

// goingAt is how many intervals are going on at instant at, without slack.
func goingAt(ivs []interval, at int64) int {
	n := 0
	for _, iv := range ivs {
		if iv.from <= at && at < iv.to {
			n++
		}
	}
	return n
}

// peakOverlap is the most intervals going on at one instant, with cut
// intervals shortened by slack, and where and which.
func peakOverlap(ivs []interval, slack int64) (int, int64, []string) {
	type edge struct {
		at    int64
		delta int
		id    string
	}
	var edges []edge
	for _, iv := range ivs {
		to := iv.to
		if iv.cut {
			to = max(iv.from, to-slack)
		}
		edges = append(edges, edge{iv.from, 1, iv.runID}, edge{to, -1, iv.runID})
	}
	// Ends before starts at one instant: [a, b] and [b, c] do not overlap.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	peak, n := 0, 0
	var peakAt int64
	var peakIDs []string
	going := map[string]bool{}
	for _, e := range edges {
		n += e.delta
		if e.delta > 0 {
			going[e.id] = true
		} else {
			delete(going, e.id)
		}
		if n > peak {
			peak, peakAt = n, e.at
			peakIDs = slices.Sorted(maps.Keys(going))
		}
	}
	return peak, peakAt, peakIDs
}

func checkHistory(in Input) []Violation {
	byRun := map[string][]HistoryRecord{}
	for _, h := range in.History {
		byRun[h.RunID] = append(byRun[h.RunID], h)
	}
	recorded := make(map[string]bool, len(in.Records))
	records := slices.Clone(in.Records)
	sort.SliceStable(records, func(i, j int) bool { return records[i].Key < records[j].Key })
	var out []Violation
	for _, r := range records {
		recorded[r.RunID] = true
		fail := func(format string, args ...any) {
			out = append(out, Violation{Key: r.Key, Text: fmt.Sprintf(format, args...)})
		}
		hs := byRun[r.RunID]
		switch {
		case len(hs) == 0:
			fail("run %s of %s (%s) has no history record", r.RunID, r.Key, r.Outcome)
		case len(hs) > 1:
			fail("run %s of %s (%s) is in the history %d times: %v", r.RunID, r.Key, r.Outcome, len(hs), hs)
		case hs[0].Outcome != r.Outcome || hs[0].Key != r.Key:
			fail("run %s of %s (%s) is in the history as %s of %s", r.RunID, r.Key, r.Outcome, hs[0].Outcome, hs[0].Key)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byRun)) {
		if recorded[id] {
			continue
		}
		for _, h := range byRun[id] {
			out = append(out, Violation{Key: h.Key, Text: fmt.Sprintf("history record %s (%s of %s) matches no run of a task", id, h.Outcome, h.Key)})
		}
	}
	return out
}
