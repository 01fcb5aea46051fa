package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestReplyAllows(t *testing.T) {
	for _, c := range []struct {
		ids   []string
		group string
		want  bool
	}{
		{nil, "", true}, {[]string{"w1"}, "", true}, {[]string{"w2"}, "", false},
		{nil, "g", true}, {nil, "other", false}, {[]string{"w1"}, "other", false},
	} {
		r := &pingReply{WorkerIDs: c.ids, Group: c.group}
		if got := r.allows("w1", []string{"g"}); got != c.want {
			t.Errorf("worker_ids %v, group %q: allows w1 of group g = %v, want %v", c.ids, c.group, got, c.want)
		}
	}
}

// TestPingReplyOfAHandEditedTask: fields of the wrong type read as zero;
// the ping of a run going on never fails on them.
func TestPingReplyOfAHandEditedTask(t *testing.T) {
	raw, _ := bson.Marshal(bson.D{{Key: "status", Value: 7}, {Key: "running", Value: "two"}, {Key: "worker_ids", Value: "w1"},
		{Key: "ping_interval_ms", Value: "often"}, {Key: "group", Value: bson.A{bson.D{{Key: "x", Value: 1}}}}})
	r := decodePingReply(raw)
	if r.Status != "" || r.Running != 0 || r.WorkerIDs != nil || r.PingIntervalMS != 0 || r.Group != "" {
		t.Fatalf("decoded %+v, want zero values", r)
	}
}

// TestUnrenewableSettingsAreIgnoredOnce: ping settings edited by hand into
// an interval not below the timeout would let the lease lapse between two
// pings; the run keeps its own, and says so once.
func TestUnrenewableSettingsAreIgnoredOnce(t *testing.T) {
	var failed []error
	p := &Pinger{log: slog.New(slog.NewTextHandler(io.Discard, nil)), notify: Notify{PingFailed: func(_ *Run, err error) { failed = append(failed, err) }}}
	r := &Run{Key: "k", RunID: "r", PingInterval: time.Second, WorkerTimeout: 3 * time.Second}
	for range 3 {
		p.applySettings(r, &pingReply{PingIntervalMS: 5000, WorkerTimeoutMS: 3000}, time.Now())
	}
	if r.PingInterval != time.Second || r.WorkerTimeout != 3*time.Second || len(failed) != 1 {
		t.Fatalf("interval %s, timeout %s, %d reports: want the run's own settings kept, reported once", r.PingInterval, r.WorkerTimeout, len(failed))
	}
	p.applySettings(r, &pingReply{PingIntervalMS: 500, WorkerTimeoutMS: 2000}, time.Now())
	if r.PingInterval != 500*time.Millisecond || r.WorkerTimeout != 2*time.Second {
		t.Fatalf("sound settings not taken: %s, %s", r.PingInterval, r.WorkerTimeout)
	}
}

// TestAnEndingRunIsPingedOnlyAtRisk: a run whose end is being written is
// pinged alone, so it is pinged not at its interval but only once its
// lease would not cover the write (twice the pings' round trip and a
// margin); a running run is pinged at its interval.
func TestAnEndingRunIsPingedOnlyAtRisk(t *testing.T) {
	p := &Pinger{latency: time.Second}
	now := time.Unix(1000, 0)
	r := &Run{Key: "k", RunID: "r", PingInterval: 10 * time.Second, WorkerTimeout: 30 * time.Second}
	r.SetLease(now.Add(30 * time.Second))
	r.nextPing = now.Add(10 * time.Second)
	if got := p.pingAt(r); !got.Equal(r.nextPing) {
		t.Fatalf("running run pinged at %s, want its interval's %s", got, r.nextPing)
	}
	r.Finished.Store(true)
	if want := now.Add(30*time.Second - 2*time.Second - reserveMargin); !p.pingAt(r).Equal(want) {
		t.Fatalf("ending run pinged at %s, want %s (its lease less the reserve)", p.pingAt(r), want)
	}
	r.failures = 1
	if got := p.pingAt(r); !got.Equal(r.nextPing) {
		t.Fatalf("ending run after a failed ping pinged at %s, want the backoff's %s", got, r.nextPing)
	}
}

// A run whose end is being written is not taken along in a due batch when
// its own at-risk time is near: it would be pinged alone, early, for
// nothing (its end usually lands within the lease). A running run is.
func TestAnEndingRunIsNotTakenAlong(t *testing.T) {
	p := &Pinger{latency: 100 * time.Millisecond, batchMax: 16}
	now := time.Unix(1000, 0)
	run := func(id string, lease, nextPing time.Duration, ending bool) *Run {
		r := &Run{Key: id, RunID: id, PingInterval: 10 * time.Second, WorkerTimeout: 30 * time.Second}
		r.SetLease(now.Add(lease))
		r.nextPing = now.Add(nextPing)
		r.Finished.Store(ending)
		return r
	}
	due := run("due", 20*time.Second, 0, false)
	along := run("along", 24*time.Second, 4*time.Second, false)
	ending := run("ending", 4*time.Second, 10*time.Second, true) // at risk 3.7 s from now: within half an interval
	later := run("later", 30*time.Second, 10*time.Second, false)
	gotDue, gotSoon, next, _ := p.schedule([]*Run{due, along, ending, later}, now)
	if len(gotDue) != 1 || gotDue[0] != due || len(gotSoon) != 1 || gotSoon[0] != along {
		t.Fatalf("due %v, taken along %v; want [due] and [along]", keysOf(gotDue), keysOf(gotSoon))
	}
	if want := now.Add(4*time.Second - p.reserve()); !next.Equal(want) {
		t.Errorf("next look at %s, want the ending run's at-risk time %s", next, want)
	}
}

func keysOf(runs []*Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Key)
	}
	return out
}

// The reserve a ping is sent with covers the slow round trips of late, not
// only their average: on a busy server one in a few takes several times
// the others, and a ping that meets it must still land within the lease.
// It comes back down as the slow ones stop.
func TestReserveCoversTheSlowRoundTrips(t *testing.T) {
	p := &Pinger{}
	r := &Run{}
	for _, d := range []time.Duration{time.Second, time.Second, 6 * time.Second, time.Second} {
		p.took(r, d)
	}
	if got := p.reserve(); got < 2*5*time.Second {
		t.Fatalf("reserve %s after a 6 s round trip among 1 s ones (average %s); want at least 10 s", got, p.latency)
	}
	for range 40 {
		p.took(r, time.Second)
	}
	if got := p.reserve(); got > 2*1100*time.Millisecond+reserveMargin {
		t.Errorf("reserve %s after 40 round trips of 1 s; want it back near 2 s", got)
	}
}

// A finished run whose lease lapsed keeps its held context (its end is
// still written, fenced, until a sweep takes the run) for one more lease,
// then loses it; the loop looks again when that grace ends.
func TestLapsedEndIsTriedForOneMoreLease(t *testing.T) {
	p := &Pinger{batchMax: 16}
	now := time.Unix(1000, 0)
	held, drop := context.WithCancelCause(context.Background())
	r := &Run{Key: "k", RunID: "r", PingInterval: 2 * time.Second, WorkerTimeout: 6 * time.Second, held: held, dropHeld: drop}
	r.Finished.Store(true)
	r.SetLease(now.Add(-time.Second)) // lapsed a second ago
	_, _, next, _ := p.schedule([]*Run{r}, now)
	if held.Err() != nil {
		t.Fatal("the end of a run lapsed a second ago was given up")
	}
	if want := now.Add(5 * time.Second); !next.Equal(want) {
		t.Errorf("next look at %s, want the grace's end %s", next, want)
	}
	p.schedule([]*Run{r}, now.Add(5*time.Second))
	if !errors.Is(context.Cause(held), errLapsed) {
		t.Errorf("after a lease more, held is %v, want cancelled with errLapsed", context.Cause(held))
	}
}

// A run renewed as pings go now is batched, however slow they are; a run
// whose last ping failed, or with less than half the lease of the run with
// most among those pinged, is pinged alone. Runs all short of lease alike
// are batched: apart, they would gain nothing.
func TestOnlyRunsBehindArePingedAlone(t *testing.T) {
	now := time.Unix(1000, 0)
	run := func(leaseLeft time.Duration, failures int) *Run {
		r := &Run{Key: "k", RunID: "r", PingInterval: 100 * time.Millisecond, WorkerTimeout: 2 * time.Second, failures: failures}
		r.SetLease(now.Add(leaseLeft))
		return r
	}
	for _, c := range []struct {
		name      string
		leaseLeft time.Duration
		failures  int
		most      time.Duration
		want      bool
	}{
		{"renewed by a ping of 300 ms", 1700 * time.Millisecond, 0, 1900 * time.Millisecond, false},
		{"renewed by a ping of one interval", 1900 * time.Millisecond, 0, 1900 * time.Millisecond, false},
		{"its last ping failed", 1900 * time.Millisecond, 1, 1900 * time.Millisecond, true},
		{"missed renewals", 900 * time.Millisecond, 0, 1900 * time.Millisecond, true},
		{"every run short alike on a slow server", 700 * time.Millisecond, 0, 800 * time.Millisecond, false},
	} {
		if got := behind(run(c.leaseLeft, c.failures), now, c.most); got != c.want {
			t.Errorf("%s: behind = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestALeaseIsTheLastOneWritten: a run's pings go one after another, so
// the lease the worker counts on is the one its last ping wrote, even when
// that is shorter than the one before (the task's worker timeout edited
// down): counting on the longer, the worker would hold a run the sweep may
// free. A batch's result taken in early (see renewed) moves nothing, for
// a later ping may have landed since.
func TestALeaseIsTheLastOneWritten(t *testing.T) {
	renewals := 0
	p := &Pinger{log: slog.New(slog.NewTextHandler(io.Discard, nil)), runs: map[string]*Run{},
		notify: Notify{Renewed: func(*Run) { renewals++ }}}
	now := time.Unix(1000, 0)
	r := &Run{Key: "k", RunID: "r", Cancel: func(error) {}, PingInterval: time.Second, WorkerTimeout: 10 * time.Second}
	p.runs[r.RunID] = r
	r.SetLease(now.Add(10 * time.Second))
	reply := &pingReply{Running: 1, PingIntervalMS: 1000, WorkerTimeoutMS: 3000}

	p.apply(context.Background(), pingResult{run: r, sent: now.Add(time.Second), lease: now.Add(4 * time.Second), reply: reply})
	if want := now.Add(4 * time.Second); !r.Lease().Equal(want) {
		t.Fatalf("lease %s after a ping wrote %s", r.Lease(), want)
	}
	p.apply(context.Background(), pingResult{run: r, sent: now, lease: now.Add(2 * time.Second), reply: reply, early: true})
	if want := now.Add(4 * time.Second); !r.Lease().Equal(want) || renewals != 2 {
		t.Fatalf("lease %s after an early result, %d renewals: want %s kept, 2 renewals", r.Lease(), renewals, want)
	}
}

// TestABatchsReadBackTellsRenewedFromMissed: a run read back with the
// lease its statement asked is renewed; with a later one, only when the
// batch's update matched every run (a later ping of its own landed
// first). Otherwise the later lease is the claim's 30 s placeholder, which
// the sweep does not go by, and the run's statement missed: pinged alone
// again, not taken as renewed. Another run id, or no task, is taken away.
func TestABatchsReadBackTellsRenewedFromMissed(t *testing.T) {
	now := time.Unix(1000, 0)
	item := pingItem{run: &Run{RunID: "r"}, lease: now.Add(2 * time.Second)}
	doc := func(run string, lease time.Time) bson.Raw {
		raw, _ := bson.Marshal(bson.D{{Key: "holders", Value: bson.D{{Key: "w", Value: bson.D{{Key: "run", Value: run}, {Key: "lease_until", Value: lease}}}}}})
		return raw
	}
	placeholder := now.Add(-500 * time.Millisecond).Add(30 * time.Second)
	for _, c := range []struct {
		what  string
		raw   bson.Raw
		early bool
		want  int
	}{
		{"the lease asked", doc("r", item.lease), false, runRenewed},
		{"a later ping's lease, after an early batch", doc("r", item.lease.Add(300*time.Millisecond)), true, runRenewed},
		{"the claim's placeholder, the statement missed", doc("r", placeholder), false, runMissed},
		{"an earlier lease, the statement missed", doc("r", now), false, runMissed},
		{"another run", doc("other", item.lease), true, runTaken},
		{"no task", nil, false, runTaken},
	} {
		if got := readBackOf(c.raw, "w", item, c.early); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}

// TestRenewLength: before any ping is answered a run is renewed by its
// claim's lease; after, by its worker timeout while that covers two pings
// at the slowest round trip and 250 ms, and by twice that (rounded up to
// 100 ms) when it does not, however its claim was leased.
func TestRenewLength(t *testing.T) {
	for _, c := range []struct {
		name      string
		reserve   time.Duration // 2 × the slowest round trip + 100 ms; 0: no ping answered yet
		claimed   time.Duration // the claim's stretched lease, 0 if none
		want      time.Duration
		stretched bool
	}{
		{"no ping answered, claimed at the worker timeout", 0, 0, 3 * time.Second, false},
		{"no ping answered, claimed stretched", 0, 8 * time.Second, 8 * time.Second, true},
		{"fast pings, claimed stretched", 300 * time.Millisecond, 8 * time.Second, 3 * time.Second, false},
		{"just keepable", 2849 * time.Millisecond, 0, 3 * time.Second, false},
		{"slow pings", 2900 * time.Millisecond, 0, 6100 * time.Millisecond, true},
	} {
		p := &Pinger{}
		p.reserveNow.Store(int64(c.reserve))
		r := &Run{PingInterval: 500 * time.Millisecond, WorkerTimeout: 3 * time.Second, LeaseFloor: c.claimed}
		got := p.RenewLength(r)
		it := newPingItem(r, time.Now(), got)
		if got != c.want || (it.stretched() > 0) != c.stretched {
			t.Errorf("%s: renewed by %v (stretched %v), want %v (stretched %v)", c.name, got, it.stretched(), c.want, c.stretched)
		}
	}
}
