package mscheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestUnansweredPingsStopHandlerAtLease: the server stops answering (no
// error, no reply). Pings give up at the lease, so the handler is cancelled
// when its lease lapses, not after the driver's own timeouts.
func TestUnansweredPingsStopHandlerAtLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	// Once frozen, the proxy forwards nothing more and answers nothing,
	// as a server that stopped answering (a partition, a hung primary).
	frozen, thaw := make(chan struct{}), make(chan struct{})
	_, client := newCmdProxy(t, func(string, bson.Raw) bool {
		select {
		case <-frozen:
			<-thaw
		default:
		}
		return false
	})
	// Thawed after the consumer's stop (registered later, run earlier)
	// and before the client disconnects (registered earlier, run later):
	// a disconnect ends its sessions through the proxy.
	t.Cleanup(func() { close(thaw) })
	ev := mschedulertest.NewEvents()
	causes := make(chan error, 1)
	cfg := fastConfig("stalled", ev)
	cfg.WriteTimeout = time.Second // the stop at the end waits for a claim stuck behind the proxy
	startConsumer(t, client.Database(coll.Database().Name()).Collection(coll.Name()), func(ctx context.Context, task *mscheduler.Task[int]) (int, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, ctx.Err()
	}, cfg)
	ev.WaitCount(t, mscheduler.EventClaimed, 1)
	waitForLeaseRenewal(t, coll, "k", "stalled")
	close(frozen)
	frozenAt := time.Now()
	select {
	case cause := <-causes:
		if !errors.Is(cause, mscheduler.ErrLeaseLost) {
			t.Fatalf("cause = %v, want ErrLeaseLost", cause)
		}
		// The lease is 600 ms; the driver would wait 30 s for a server.
		if d := time.Since(frozenAt); d > 5*time.Second {
			t.Fatalf("handler cancelled %s after the server stopped answering, want about the 600ms lease", d)
		}
	case <-time.After(waitTimeout):
		t.Fatal("handler was not cancelled after its lease lapsed")
	}
}
