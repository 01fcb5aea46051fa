package mscheduler_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// stallProxy forwards TCP connections to a server until frozen; frozen, it
// keeps the connections open and forwards nothing, as a server that stopped
// answering (a partition, a hung primary) does.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed when frozen
	conns  []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, frozen: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies until frozen; then it stops reading and holds the connection.
func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			return
		}
	}
}

func (p *stallProxy) freeze() { close(p.frozen) }

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestUnansweredPingsStopHandlerAtLease: the server stops answering (no
// error, no reply). Pings give up at the lease, so the handler is cancelled
// when its lease lapses, not after the driver's own timeouts.
func TestUnansweredPingsStopHandlerAtLease(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	if _, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", PingInterval: 100 * time.Millisecond, WorkerTimeout: 600 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the proxy stands in front of a single-host server", len(hosts))
	}
	host := hosts[0]
	proxy := newStallProxy(t, host)
	client := mschedulertest.NewClient(t, options.Client().SetHosts([]string{proxy.ln.Addr().String()}).SetDirect(true))
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
	proxy.freeze()
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
