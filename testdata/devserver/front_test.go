package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// fakeBackend answers every message as FerretDB 1.24 does, moreToCome or not, with an OP_MSG
// whose responseTo is the request's id and whose body echoes the request's. It records the
// highest number of requests it ever had in flight at once.
type fakeBackend struct {
	ln       net.Listener
	delay    time.Duration
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	done     chan struct{} // closed at cleanup; cuts delays short
	wg       sync.WaitGroup
}

func startFakeBackend(t *testing.T, delay time.Duration) *fakeBackend {
	t.Helper()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	b := &fakeBackend{ln: ln, delay: delay, done: make(chan struct{})}
	b.wg.Go(b.accept)
	t.Cleanup(func() {
		close(b.done)
		ln.Close()
		b.wg.Wait()
	})

	return b
}

func (b *fakeBackend) accept() {
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Go(func() { b.serve(conn) })
	}
}

func (b *fakeBackend) serve(conn net.Conn) {
	defer conn.Close()

	for {
		req, err := readMessage(conn)
		if err != nil {
			return
		}

		n := b.inFlight.Add(1)
		for {
			m := b.maxSeen.Load()
			if n <= m || b.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-time.After(b.delay):
		case <-b.done:
		}
		b.inFlight.Add(-1)

		reply := bytes.Clone(req)
		binary.LittleEndian.PutUint32(reply[8:12], binary.LittleEndian.Uint32(req[4:8]))
		binary.LittleEndian.PutUint32(reply[16:20], 0) // the reply's own flags
		if _, err := conn.Write(reply); err != nil {
			return
		}
	}
}

// startFront runs a front before backend and returns its address; the front is shut down,
// and checked to have stopped, when the test ends.
func startFront(t *testing.T, backend *fakeBackend) string {
	t.Helper()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	f := newFront(backend.ln.Addr().String(), slog.New(slog.NewTextHandler(t.Output(), nil)), nil)
	served := make(chan error, 1)
	go func() { served <- f.serve(ctx, ln) }()

	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("front did not stop within 5s")
		}
	})

	return ln.Addr().String()
}

// message builds an OP_MSG with the given request id and flags and a body of size bytes.
func message(requestID int32, flags uint32, size int) []byte {
	msg := make([]byte, headerLen+4+size)
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	binary.LittleEndian.PutUint32(msg[16:20], flags)
	for i := headerLen + 4; i < len(msg); i++ {
		msg[i] = byte(i)
	}
	return msg
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))

	return conn
}

// roundTrip sends req and checks that the reply answers it and carries its body.
func roundTrip(t *testing.T, conn net.Conn, req []byte) {
	t.Helper()

	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}

	reply, err := readMessage(conn)
	if err != nil {
		t.Fatal(err)
	}

	if got, want := binary.LittleEndian.Uint32(reply[8:12]), binary.LittleEndian.Uint32(req[4:8]); got != want {
		t.Fatalf("reply answers request %d, want %d", got, want)
	}
	if !bytes.Equal(reply[headerLen+4:], req[headerLen+4:]) {
		t.Fatalf("reply body differs from the request's (%d and %d bytes)", len(reply), len(req))
	}
}

func TestFrontSerializes(t *testing.T) {
	backend := startFakeBackend(t, time.Millisecond)
	addr := startFront(t, backend)

	const clients, requests = 8, 20

	conns := make([]net.Conn, clients)
	for i := range conns {
		conns[i] = dial(t, addr)
	}

	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			for r := range requests {
				req := message(int32(i*1000+r), 0, 64)
				if _, err := conn.Write(req); err != nil {
					t.Error(err)
					return
				}
				reply, err := readMessage(conn)
				if err != nil {
					t.Error(err)
					return
				}
				if got := int32(binary.LittleEndian.Uint32(reply[8:12])); got != int32(i*1000+r) {
					t.Errorf("client %d: reply to %d, want %d", i, got, i*1000+r)
					return
				}
			}
		})
	}
	wg.Wait()

	if m := backend.maxSeen.Load(); m != 1 {
		t.Errorf("backend saw %d requests in flight at once, want 1", m)
	}
}

func TestFrontDropsReplyToMoreToCome(t *testing.T) {
	addr := startFront(t, startFakeBackend(t, 0))
	conn := dial(t, addr)

	// The client expects no reply to this one; the backend sends one anyway.
	if _, err := conn.Write(message(1, flagMoreToCome, 16)); err != nil {
		t.Fatal(err)
	}

	// The next reply the client reads must be the one to its next request.
	roundTrip(t, conn, message(2, 0, 16))
}

func TestFrontLargeMessage(t *testing.T) {
	addr := startFront(t, startFakeBackend(t, 0))
	conn := dial(t, addr)

	roundTrip(t, conn, message(1, 0, maxMessageLen-headerLen-4))
	roundTrip(t, conn, message(2, 0, 10))
}

func TestFrontRejectsBadLength(t *testing.T) {
	addr := startFront(t, startFakeBackend(t, 0))
	conn := dial(t, addr)

	bad := message(1, 0, 16)
	binary.LittleEndian.PutUint32(bad[0:4], maxMessageLen+1)
	if _, err := conn.Write(bad); err != nil {
		t.Fatal(err)
	}

	// The front closes the connection instead of answering.
	if _, err := readMessage(conn); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Fatalf("read after a bad length: %v, want the connection closed", err)
		}
	}
}

// TestFrontShutdown stops the front while one request is stuck in the backend and another
// client waits for the lock; startFront's cleanup checks that serve returns.
func TestFrontShutdown(t *testing.T) {
	backend := startFakeBackend(t, time.Hour)
	addr := startFront(t, backend)

	for i := range 2 {
		conn := dial(t, addr)
		if _, err := conn.Write(message(int32(i), 0, 16)); err != nil {
			t.Fatal(err)
		}
	}

	// Let the first request reach the backend before the cleanup shuts the front down.
	deadline := time.Now().Add(5 * time.Second)
	for backend.inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("request never reached the backend")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHelloIsAnsweredWhileTheLockIsHeld: hello (whose localTime clients take as the server's
// clock half way through the round trip) does not wait behind commands that hold the lock; a
// find does.
func TestHelloIsAnsweredWhileTheLockIsHeld(t *testing.T) {
	s := startServer(t, nil)
	ctx := context.Background()
	if err := s.db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		t.Fatal(err)
	}
	s.front.exchangeMu.Lock()
	locked := true
	defer func() {
		if locked {
			s.front.exchangeMu.Unlock()
		}
	}()
	helloCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var reply struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := s.db.RunCommand(helloCtx, bson.D{{Key: "hello", Value: 1}}).Decode(&reply); err != nil || reply.LocalTime.IsZero() {
		t.Fatalf("hello while the lock is held: %+v, %v", reply, err)
	}
	findCtx, cancelFind := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelFind()
	if err := s.db.Collection("c").FindOne(findCtx, bson.D{}).Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a find while the lock is held: %v, want it to wait past its deadline", err)
	}
	s.front.exchangeMu.Unlock()
	locked = false
}
