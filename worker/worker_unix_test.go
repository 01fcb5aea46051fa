//go:build unix

package worker_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
)

// TestSIGTERMStopsRun: a SIGTERM to the process stops Run cleanly, as a
// cancelled context does.
func TestSIGTERMStopsRun(t *testing.T) {
	name := collectionName(t)
	w := newWorker(t, worker.Config{})
	ev := mschedulertest.NewEvents()
	if err := worker.Register(w, name, add, fastConsumer(ev)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case <-w.Ready(): // Run is catching the signal from here on
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	publish(t, name, mscheduler.Task[sum]{Key: "k"})
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after SIGTERM = %v, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after SIGTERM")
	}
}
