package mscheduler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// FuzzPublishInput: any task either is refused with an *InvalidError that
// names a field (so nothing would be written), or builds a document that a
// worker decodes and accepts as it is.
func FuzzPublishInput(f *testing.F) {
	f.Add("key", 1, int64(10_000), int64(30_000), 2, int64(1000), 3, int64(0), "w1", "g", "tag", 0, 1, "")
	f.Add("", -1, int64(0), int64(0), -2, int64(-1), 0, int64(-5), "a.b", "", "", 1, 0, "0 9 * * *")
	f.Add(strings.Repeat("k", 1025), 0, int64(30_000), int64(10_000), -1, int64(0), 1, int64(100), "$x", "", "t", 2, 5, "bad cron")
	f.Add("k", 3, int64(1), int64(2), 0, int64(10), 5, int64(1), "", "gpu", "", 3, 32767, "")
	f.Fuzz(func(t *testing.T, key string, concurrency int, pingMS, timeoutMS int64, maxRetries int, retryMS int64, maxFailed int, deadlineMS int64,
		workerID, group, tag string, planKind, every int, cron string) {
		task := mscheduler.Task[map[string]int]{
			Key: key, Params: map[string]int{"n": concurrency}, Concurrency: concurrency,
			PingInterval: time.Duration(pingMS) * time.Millisecond, WorkerTimeout: time.Duration(timeoutMS) * time.Millisecond,
			MaxRetries: maxRetries, RetryDelay: time.Duration(retryMS) * time.Millisecond, MaxFailedRuns: maxFailed,
			Timeout: time.Duration(deadlineMS) * time.Millisecond, Group: group,
		}
		if workerID != "" {
			task.WorkerIDs = []string{workerID}
		}
		if tag != "" || planKind%2 == 1 {
			task.Tags = []string{tag}
		}
		now := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
		switch planKind % 4 {
		case 1:
			p := mscheduler.Every(every, mscheduler.Second)
			task.Plan = &p
		case 2:
			p := mscheduler.Cron(cron)
			task.Plan = &p
		case 3:
			p := mscheduler.Monthly(every, every%25, every%61)
			p.Zone = "Europe/Berlin"
			task.Plan = &p
		}
		err := mscheduler.BuildTaskDoc(task, now)
		var ie *mscheduler.InvalidError
		switch {
		case err == nil:
		case errors.As(err, &ie):
			if ie.Field == "" || ie.Reason == "" {
				t.Fatalf("invalid error without a field or reason: %#v", ie)
			}
		default:
			t.Fatalf("task %+v: not refused with an InvalidError, and not accepted: %v", task, err)
		}
	})
}

// FuzzDecodeHandEdited: a task document edited by hand into anything never
// panics a worker; it either runs, or is refused (and would be set
// invalid) with a reason that names the field.
func FuzzDecodeHandEdited(f *testing.F) {
	valid := bson.D{
		{Key: "_id", Value: "k"}, {Key: "key", Value: "k"}, {Key: "schema", Value: 1}, {Key: "params", Value: bson.D{{Key: "n", Value: 1}}},
		{Key: "status", Value: "running"}, {Key: "run_at", Value: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Key: "concurrency", Value: 1}, {Key: "ping_interval_ms", Value: 100}, {Key: "worker_timeout_ms", Value: 1000},
		{Key: "max_retries", Value: 2}, {Key: "max_failed_runs", Value: 3}, {Key: "free", Value: 0}, {Key: "running", Value: 1},
		{Key: "succeeded", Value: 0}, {Key: "failed_runs", Value: 0}, {Key: "runs", Value: bson.A{}},
		{Key: "holders", Value: bson.D{{Key: "w", Value: bson.D{{Key: "run", Value: "r"}}}}},
		{Key: "plan", Value: bson.D{{Key: "kind", Value: "every"}, {Key: "every", Value: 5}, {Key: "unit", Value: "minute"}, {Key: "repeat", Value: -1},
			{Key: "missed", Value: "skip"}, {Key: "planned", Value: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	}
	seed, _ := bson.Marshal(valid)
	f.Add(seed)
	for _, edit := range []bson.E{
		{Key: "concurrency", Value: "three"}, {Key: "concurrency", Value: 0}, {Key: "holders", Value: "x"},
		{Key: "plan", Value: bson.D{{Key: "kind", Value: "cron"}, {Key: "cron", Value: "every full moon"}}},
		{Key: "plan", Value: bson.D{{Key: "kind", Value: "weekly"}, {Key: "weekday", Value: 9}, {Key: "time", Value: "25:00"}}},
		{Key: "params", Value: bson.A{1, 2}}, {Key: "worker_timeout_ms", Value: -1},
		{Key: "max_failed_runs", Value: "3"}, {Key: "failed_runs", Value: bson.A{}}, {Key: "runs", Value: "none"},
		{Key: "status", Value: "queued"}, {Key: "run_at", Value: "tomorrow"}, {Key: "running", Value: 1.5},
		{Key: "holders", Value: bson.D{{Key: "w", Value: bson.D{{Key: "lease_until", Value: "soon"}}}}},
	} {
		d := append(bson.D{}, valid...)
		for i := range d {
			if d[i].Key == edit.Key {
				d[i] = edit
			}
		}
		raw, _ := bson.Marshal(d)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if bson.Raw(raw).Validate() != nil {
			return // not a document: the server never returns such bytes
		}
		field, reason := mscheduler.Inspect(raw)
		ok, refusedField, err := mscheduler.DecodeForRun(raw)
		if ok {
			if field != "" {
				t.Fatalf("run accepted, but inspection finds field %s %s", field, reason)
			}
			return
		}
		if refusedField == "" || !strings.Contains(err.Error(), "field "+refusedField) {
			t.Fatalf("refused without naming a field: %v", err)
		}
	})
}
