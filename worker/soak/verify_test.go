package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/worker/soak/histcheck"
)

// maxReports bounds the failures reported per check.
const maxReports = 10

// Stored forms, as the README documents them.
type storedRun struct {
	RunID      string     `bson:"run_id"`
	WorkerID   string     `bson:"worker_id"`
	Started    time.Time  `bson:"started"`
	LeaseUntil time.Time  `bson:"lease_until"`
	Finished   time.Time  `bson:"finished"`
	Outcome    string     `bson:"outcome"`
	Attempts   int        `bson:"attempts"`
	Error      string     `bson:"error"`
	Planned    *time.Time `bson:"planned"`
}

type storedPlan struct {
	Repeat  int       `bson:"repeat"`
	Runs    int       `bson:"runs"`
	Skipped int       `bson:"skipped"`
	Planned time.Time `bson:"planned"`
}

type storedTask struct {
	Key             string         `bson:"key"`
	Status          string         `bson:"status"`
	Params          params         `bson:"params"`
	Concurrency     int            `bson:"concurrency"`
	DistinctWorkers bool           `bson:"distinct_workers"`
	MaxFailedRuns   int            `bson:"max_failed_runs"`
	Free            int            `bson:"free"`
	Running         int            `bson:"running"`
	Succeeded       int            `bson:"succeeded"`
	FailedRuns      int            `bson:"failed_runs"`
	Holders         map[string]any `bson:"holders"`
	DoneBy          []string       `bson:"done_by"`
	NextExpiry      *time.Time     `bson:"next_expiry"`
	Runs            []storedRun    `bson:"runs"`
	Plan            *storedPlan    `bson:"plan"`
}

func readTasks(t *testing.T, coll *mongo.Collection) map[string]*storedTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("read tasks: %v", err)
	}
	var docs []*storedTask
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatalf("read tasks: %v", err)
	}
	out := map[string]*storedTask{}
	for _, d := range docs {
		out[d.Key] = d
	}
	return out
}

// logRun is one run as the handler logs tell it: a start line per handler
// call (local retries call it again), an end line per call that returned.
type logRun struct {
	key, runID, worker string
	planned            int64 // UnixMilli; 0 for a task without a plan
	starts             []int64
	ends               []logEnd
}

type logEnd struct {
	outcome string
	at      int64
}

func (r *logRun) ended() bool { return len(r.ends) == len(r.starts) }

func (r *logRun) lastOutcome() string {
	if len(r.ends) == 0 {
		return ""
	}
	return r.ends[len(r.ends)-1].outcome
}

// readHandlerLogs reads every worker's handler log, by run id.
func readHandlerLogs(paths []string) (map[string]*logRun, error) {
	runs := map[string]*logRun{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // a worker killed before it opened its log
		}
		if err != nil {
			return nil, err
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			return nil, fmt.Errorf("%s: last line is cut short: lines are written whole", path)
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for n := 1; sc.Scan(); n++ {
			f := strings.Fields(sc.Text())
			bad := func(why string) error { return fmt.Errorf("%s:%d: %s: %q", path, n, why, sc.Text()) }
			if len(f) != 6 {
				return nil, bad("want 6 fields")
			}
			at, err := strconv.ParseInt(f[5], 10, 64)
			if err != nil {
				return nil, bad("bad time")
			}
			r := runs[f[2]]
			if r == nil {
				r = &logRun{key: f[1], runID: f[2], worker: f[3]}
				runs[f[2]] = r
			}
			if r.key != f[1] || r.worker != f[3] {
				return nil, bad("run id seen with another key or worker")
			}
			switch f[0] {
			case "start":
				planned, err := strconv.ParseInt(f[4], 10, 64)
				if err != nil {
					return nil, bad("bad planned time")
				}
				if !r.ended() {
					return nil, bad("a call started while the run's previous call had not ended")
				}
				if len(r.starts) > 0 && planned != r.planned {
					return nil, bad("planned time changed within a run")
				}
				r.planned = planned
				r.starts = append(r.starts, at)
			case "end":
				if len(r.ends) >= len(r.starts) {
					return nil, bad("end without a start")
				}
				r.ends = append(r.ends, logEnd{outcome: f[4], at: at})
			default:
				return nil, bad("unknown line")
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// verifier checks the end state of a soak.
type verifier struct {
	t       testing.TB
	specs   map[string]spec
	docs    map[string]*storedTask
	runs    map[string]*logRun        // from the handler logs, by run id
	workers map[string]bool           // every worker incarnation started
	history []histcheck.HistoryRecord // the run history collection

	records  map[string]storedRun // every run record, by run id
	failures map[string]int       // per check
}

// fail reports a violation of a check, up to maxReports per check.
func (v *verifier) fail(check, format string, args ...any) {
	v.t.Helper()
	if v.failures == nil {
		v.failures = map[string]int{}
	}
	v.failures[check]++
	if n := v.failures[check]; n <= maxReports {
		v.t.Errorf("%s: %s", check, fmt.Sprintf(format, args...))
	} else if n == maxReports+1 {
		v.t.Errorf("%s: more violations left out", check)
	}
}

// summary is what the soak reports at the end.
type summary struct {
	tasks        map[string]int // by final status
	records      map[string]int // run records by outcome
	handlerRuns  int            // runs that called the handler
	calls        int            // handler calls, local retries included
	noEnd        int            // runs whose handler never logged its end (killed)
	cutAtLease   int            // runs whose interval was cut at their lease
	rerunPlanned int            // planned times whose handler succeeded, but whose run expired: run again
	maxOverlap   time.Duration  // the largest overlap of a run cut at its lease with a later run
	pastLease    int            // expired runs whose handler went on after the lease lapsed
	maxPastLease time.Duration  // and the longest it went on
	worstPast    string         // which run that was, and what ran beside it
	checks       map[string]int // violations per check
}

func (v *verifier) verify() summary {
	v.t.Helper()
	sum := summary{tasks: map[string]int{}, records: map[string]int{}}
	v.records = map[string]storedRun{}
	for _, d := range v.docs {
		sum.tasks[d.Status]++
		for _, r := range d.Runs {
			sum.records[r.Outcome]++
			if _, dup := v.records[r.RunID]; dup {
				v.fail("5 nothing lost", "run %s of %s recorded twice", r.RunID, d.Key)
			}
			v.records[r.RunID] = r
		}
	}
	for _, r := range v.runs {
		sum.handlerRuns++
		sum.calls += len(r.starts)
		if !r.ended() {
			sum.noEnd++
		}
	}
	v.checkFinalStates()
	v.checkSucceeded()
	sum.rerunPlanned = v.checkPlannedOnce()
	hist := histcheck.Check(v.histInput())
	sum.maxOverlap, sum.cutAtLease = v.checkOverlaps(hist)
	for id, r := range v.runs {
		rec, ok := v.records[id]
		if !ok || rec.Outcome != "expired" || !r.ended() {
			continue
		}
		end := r.ends[len(r.ends)-1].at
		if past := time.Duration(end - rec.LeaseUntil.UnixNano()); past > 0 {
			sum.pastLease++
			if past > sum.maxPastLease {
				sum.maxPastLease = past
				sum.worstPast = fmt.Sprintf("run %s of %s on %s, ended %s", id, r.key, r.worker, r.lastOutcome())
				for _, o := range v.runs {
					if o.key == r.key && o != r && o.starts[0] >= rec.LeaseUntil.UnixNano() && o.starts[0] < end {
						sum.worstPast += fmt.Sprintf("; run %s on %s started %s after that lease lapsed, while it went on",
							o.runID, o.worker, time.Duration(o.starts[0]-rec.LeaseUntil.UnixNano()).Round(time.Millisecond))
					}
				}
			}
		}
	}
	v.checkNothingLost()
	v.checkHistory(hist)
	sum.checks = v.failures
	return sum
}

// 1. Every task reached its expected final state.
func (v *verifier) checkFinalStates() {
	const check = "1 final state"
	for _, key := range slices.Sorted(maps.Keys(v.specs)) {
		s, d := v.specs[key], v.docs[key]
		if d == nil {
			v.fail(check, "task %s is missing", key)
			continue
		}
		want := "succeeded"
		switch s.kind {
		case kindFail:
			want = "failed"
		case kindRecurring:
			want = "finished"
		}
		if d.Status != want {
			v.fail(check, "task %s is %s, want %s (runs %s)", key, d.Status, want, outcomes(d.Runs))
		}
		// Repeat counts planned times: each one ran or was skipped.
		if s.kind == kindRecurring && (d.Plan == nil || d.Plan.Runs+d.Plan.Skipped != s.repeat) {
			v.fail(check, "recurring task %s: plan %+v, want runs + skipped == repeat == %d", key, d.Plan, s.repeat)
		}
		if d.Params.Kind != s.kind || d.Concurrency != s.concurrency || d.DistinctWorkers != s.distinct || d.MaxFailedRuns != s.maxFailed {
			v.fail(check, "task %s: stored options %+v do not match what was published", key, d)
		}
	}
	for key := range v.docs {
		if _, ok := v.specs[key]; !ok {
			v.fail(check, "unexpected task %s in the collection", key)
		}
	}
}

// 2. Succeeded runs per task equal its concurrency; distinct workers where
// asked; the counters agree with the records.
func (v *verifier) checkSucceeded() {
	const check = "2 succeeded runs"
	for _, key := range slices.Sorted(maps.Keys(v.specs)) {
		s, d := v.specs[key], v.docs[key]
		if d == nil {
			continue
		}
		succeeded, failed, expired := byOutcome(d.Runs)
		wantRecords, wantCounter := s.concurrency, s.concurrency
		switch s.kind {
		case kindFail:
			wantRecords, wantCounter = 0, 0
			if d.FailedRuns != s.maxFailed || len(failed)+len(expired) != s.maxFailed {
				v.fail(check, "always-failing task %s: failed_runs %d, failed+expired records %d, want both %d", key, d.FailedRuns, len(failed)+len(expired), s.maxFailed)
			}
		case kindRecurring:
			wantRecords = s.concurrency // the counter is the last occurrence's
			if d.Plan != nil {
				wantRecords = d.Plan.Runs * s.concurrency
			}
			if lastMissed(d) {
				wantCounter = 0
			}
		}
		if d.Succeeded != wantCounter || len(succeeded) != wantRecords {
			v.fail(check, "task %s: succeeded counter %d, succeeded records %d; want %d and %d (runs %s)", key, d.Succeeded, len(succeeded), wantCounter, wantRecords, outcomes(d.Runs))
		}
		if s.kind != kindFail && len(failed) > 0 {
			v.fail(check, "task %s: %d failed runs, but its handler fails no run (%s)", key, len(failed), outcomes(d.Runs))
		}
		if s.kind != kindFail && s.kind != kindRecurring && d.FailedRuns != len(failed)+len(expired) {
			v.fail(check, "task %s: failed_runs %d, but %d failed and expired records", key, d.FailedRuns, len(failed)+len(expired))
		}
		if s.kind == kindRetry {
			for _, r := range succeeded {
				if r.Attempts != 2 {
					v.fail(check, "retry task %s: run %s succeeded after %d attempts, want 2 (the first always fails)", key, r.RunID, r.Attempts)
				}
			}
		}
		if s.distinct {
			var by []string
			for _, r := range succeeded {
				by = append(by, r.WorkerID)
			}
			slices.Sort(by)
			if len(slices.Compact(slices.Clone(by))) != len(by) {
				v.fail(check, "distinct-workers task %s succeeded twice on one worker: %v", key, by)
			}
			done := slices.Sorted(slices.Values(d.DoneBy))
			if !slices.Equal(done, by) {
				v.fail(check, "distinct-workers task %s: done_by %v, succeeded by %v", key, done, by)
			}
		}
	}
}

// 3. No planned time of a recurring task succeeded more often than its
// concurrency, by the records and by the handler logs, and planned times
// succeeded in their order. It returns how many planned times had a handler
// success whose run then expired (the run end was lost with its worker), so
// that the planned time ran again: at least once, as documented.
func (v *verifier) checkPlannedOnce() int {
	const check = "3 planned times once"
	reruns := 0
	for _, key := range slices.Sorted(maps.Keys(v.specs)) {
		s, d := v.specs[key], v.docs[key]
		if s.kind != kindRecurring || d == nil {
			continue
		}
		byPlanned := map[int64]int{}
		var last int64
		for _, r := range d.Runs {
			if r.Planned == nil {
				v.fail(check, "task %s: run %s has no planned time", key, r.RunID)
				continue
			}
			if r.Outcome != "succeeded" {
				continue
			}
			p := r.Planned.UnixMilli()
			byPlanned[p]++
			if p < last || (p == last && s.concurrency == 1) {
				v.fail(check, "task %s: planned time %s succeeded after %s", key, r.Planned.UTC(), time.UnixMilli(last).UTC())
			}
			last = p
			if lr := v.runs[r.RunID]; lr == nil || lr.planned != p || lr.lastOutcome() != logSucceeded {
				v.fail(check, "task %s: run %s succeeded for %s, but the handler logs say %+v", key, r.RunID, r.Planned.UTC(), lr)
			}
		}
		for p, n := range byPlanned {
			if n > s.concurrency {
				v.fail(check, "task %s: planned time %s succeeded %d times (records)", key, time.UnixMilli(p).UTC(), n)
			}
		}
		if d.Plan != nil && len(byPlanned) != d.Plan.Runs {
			v.fail(check, "task %s: %d planned times succeeded, want plan.runs %d", key, len(byPlanned), d.Plan.Runs)
		}
		logged := map[int64][]string{}
		for _, r := range v.runs {
			if r.key != key || r.lastOutcome() != logSucceeded {
				continue
			}
			if rec, ok := v.records[r.runID]; ok && rec.Outcome == "expired" {
				reruns++
				continue
			}
			logged[r.planned] = append(logged[r.planned], r.runID)
		}
		for p, ids := range logged {
			if len(ids) > s.concurrency {
				v.fail(check, "task %s: planned time %s succeeded in the handler of runs %v, none of them expired", key, time.UnixMilli(p).UTC(), ids)
			}
		}
	}
	return reruns
}

// histInput is what the history checker is given: the handler logs' runs,
// the tasks' run records (by key, each task's in its order) and the run
// history, of the tasks of specs.
func (v *verifier) histInput() histcheck.Input {
	in := histcheck.Input{History: v.history, Concurrency: map[string]int{}, Slack: histcheck.DefaultSlack}
	for key, s := range v.specs {
		in.Concurrency[key] = s.concurrency
	}
	for _, id := range slices.Sorted(maps.Keys(v.runs)) {
		r := v.runs[id]
		hr := histcheck.Run{Key: r.key, RunID: r.runID, Worker: r.worker, Start: time.Unix(0, r.starts[0])}
		if r.ended() {
			hr.End = time.Unix(0, r.ends[len(r.ends)-1].at)
		}
		in.Runs = append(in.Runs, hr)
	}
	for _, key := range slices.Sorted(maps.Keys(v.docs)) {
		for _, r := range v.docs[key].Runs {
			in.Records = append(in.Records, histcheck.Record{Key: key, RunID: r.RunID, Worker: r.WorkerID,
				Outcome: r.Outcome, LeaseUntil: r.LeaseUntil, Finished: r.Finished})
		}
	}
	return in
}

// 4. No more runs of a task than its concurrency overlapped while their
// leases were valid, and no worker ran two runs of one task at once (see
// package histcheck). It returns the largest overlap of an interval cut at
// its lease with another one (within histcheck.DefaultSlack it is
// allowed), and how many intervals were cut.
func (v *verifier) checkOverlaps(rep histcheck.Report) (time.Duration, int) {
	const check = "4 concurrency bound"
	for _, f := range rep.Overlaps {
		v.fail(check, "%s", f)
	}
	return rep.MaxCutOverlap, rep.Cut
}

// 5. Nothing lost or stuck: no holders left, no run counted as running,
// counters consistent; every run the handlers started is recorded, the ones
// that never ended as expired or released; every succeeded or failed record
// is a run a handler ran.
func (v *verifier) checkNothingLost() {
	const check = "5 nothing lost"
	for _, key := range slices.Sorted(maps.Keys(v.docs)) {
		d := v.docs[key]
		if len(d.Holders) != 0 || d.Running != 0 || d.NextExpiry != nil {
			v.fail(check, "task %s: holders %v, running %d, next_expiry %v after every worker stopped", key, d.Holders, d.Running, d.NextExpiry)
		}
		// In every status, a plan finished with its last planned times
		// missed included (the claim that found them gave its slot back):
		// the invariant of the task's state (mscheduler/internal/taskstate).
		if d.Free != d.Concurrency-d.Running-d.Succeeded {
			v.fail(check, "task %s: free %d, want concurrency %d - running %d - succeeded %d", key, d.Free, d.Concurrency, d.Running, d.Succeeded)
		}
		for _, r := range d.Runs {
			if !v.workers[r.WorkerID] {
				v.fail(check, "task %s: run %s recorded for unknown worker %q", key, r.RunID, r.WorkerID)
			}
			lr := v.runs[r.RunID]
			switch {
			case (r.Outcome == "succeeded" || r.Outcome == "failed") && lr == nil:
				v.fail(check, "task %s: run %s recorded %s, but no handler logged it", key, r.RunID, r.Outcome)
			case r.Outcome == "succeeded" && lr.lastOutcome() != logSucceeded, r.Outcome == "failed" && lr.lastOutcome() != logFailed:
				v.fail(check, "task %s: run %s recorded %s, but its handler's last call logged %q", key, r.RunID, r.Outcome, lr.lastOutcome())
			case lr != nil && (lr.key != key || lr.worker != r.WorkerID):
				v.fail(check, "run %s recorded on %s by %s, logged on %s by %s", r.RunID, key, r.WorkerID, lr.key, lr.worker)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(v.runs)) {
		lr := v.runs[id]
		rec, ok := v.records[id]
		switch {
		case !ok:
			v.fail(check, "run %s of %s (worker %s, ended %v) is in the handler logs but recorded nowhere", id, lr.key, lr.worker, lr.ended())
		case !lr.ended() && rec.Outcome != "expired" && rec.Outcome != "released":
			v.fail(check, "run %s of %s never logged its end, but is recorded %s", id, lr.key, rec.Outcome)
		}
	}
}

// historyRecord is a run in the history collection.
type historyRecord struct {
	Key     string `bson:"key"`
	RunID   string `bson:"run_id"`
	Outcome string `bson:"outcome"`
}

func readHistory(t *testing.T, coll *mongo.Collection) []histcheck.HistoryRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := coll.Database().Collection(coll.Name()+".runs").Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("read run history: %v", err)
	}
	var recs []historyRecord
	if err := cur.All(ctx, &recs); err != nil {
		t.Fatalf("read run history: %v", err)
	}
	out := make([]histcheck.HistoryRecord, len(recs))
	for i, r := range recs {
		out[i] = histcheck.HistoryRecord(r)
	}
	return out
}

// 6. The run history holds every run the tasks recorded, once, with the
// same outcome, and nothing else (see package histcheck).
func (v *verifier) checkHistory(rep histcheck.Report) {
	const check = "6 history"
	for _, f := range rep.History {
		v.fail(check, "%s", f)
	}
}

func outcomes(runs []storedRun) string {
	var parts []string
	for _, r := range runs {
		parts = append(parts, r.WorkerID+":"+r.Outcome)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (s summary) log(t *testing.T, f faults, took time.Duration, seed uint64, incarnations, archived int) {
	t.Helper()
	t.Logf("summary: tasks by final state: %v (archived before the end: %d)", statuses(s.tasks), archived)
	t.Logf("summary: runs by outcome: %v", statuses(s.records))
	t.Logf("summary: handler runs %d (calls %d), killed before their end %d, cut at their lease %d, planned times run again after a lost end %d, largest lease-boundary overlap %s (allowed %s)",
		s.handlerRuns, s.calls, s.noEnd, s.cutAtLease, s.rerunPlanned, s.maxOverlap, histcheck.DefaultSlack)
	t.Logf("summary: expired runs whose handler went on after its lease lapsed: %d (longest %s%s)", s.pastLease, s.maxPastLease.Round(time.Millisecond), cond(s.worstPast != "", ": "+s.worstPast, ""))
	t.Logf("summary: worker kills %d (%d incarnations), server restarts %d (down %s), duration %s, seed %d",
		f.kills, incarnations, f.restarts, f.downtime.Round(time.Millisecond), took.Round(time.Second), seed)
	if len(s.checks) > 0 {
		t.Logf("summary: violations per check: %v", s.checks)
	}
}

func cond(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// lastMissed reports a plan that finished without running its last
// occurrence: its last planned times came and went (a claim found them too
// late, after an outage), so the claim gave its slot back and finished the
// task, with the last occurrence's counter at 0.
func lastMissed(d *storedTask) bool {
	return d.Plan != nil && d.Status == "finished" && d.Plan.Skipped > 0 && d.Succeeded == 0 && d.Running == 0
}

// byOutcome splits a task's run records into the succeeded, failed and
// expired ones.
func byOutcome(runs []storedRun) (succeeded, failed, expired []storedRun) {
	for _, r := range runs {
		switch r.Outcome {
		case "succeeded":
			succeeded = append(succeeded, r)
		case "failed":
			failed = append(failed, r)
		case "expired":
			expired = append(expired, r)
		}
	}
	return succeeded, failed, expired
}
