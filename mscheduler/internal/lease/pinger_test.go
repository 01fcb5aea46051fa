package lease

import (
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
