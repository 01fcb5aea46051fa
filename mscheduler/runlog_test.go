package mscheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// At Info, a worker logs the runs that are news (a failure), not each
// success: a busy worker's log would be little else.
func TestSuccessesLogAtDebugOnly(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	p := newProducer[string](t, coll, nil)
	var logs mschedulertest.Buffer
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("log-worker", ev)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "bad" {
			return "", errors.New("no recipient")
		}
		return "sent", nil
	}, cfg)
	for _, key := range []string{"good", "bad"} {
		if _, err := p.Publish(ctxT(t), mscheduler.Task[string]{Key: key, Params: key, MaxRetries: mscheduler.NoRetries, MaxFailedRuns: 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	ev.WaitCount(t, mscheduler.EventFailed, 1)
	out := logs.String()
	if !strings.Contains(out, `level=WARN msg="run failed"`) || !strings.Contains(out, "key=bad") {
		t.Errorf("the failed run is not logged at Warn:\n%s", out)
	}
	if strings.Contains(out, "run succeeded") || strings.Contains(out, "key=good") {
		t.Errorf("the successful run is logged at Info:\n%s", out)
	}
}
