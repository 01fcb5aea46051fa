package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Wire protocol constants (https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/).
const (
	headerLen = 16 // messageLength, requestID, responseTo, opCode: four little-endian int32s

	// maxMessageLen is MongoDB's maxMessageSizeBytes, which FerretDB 1.24 also enforces
	// (github.com/FerretDB/wire.MaxMsgLen). Anything larger is a framing error, not a message.
	maxMessageLen = 48_000_000

	opMsg          = 2013
	flagMoreToCome = 1 << 1 // OP_MSG flagBits: the sender will not wait for (or send) a reply
)

// front is the serializing proxy placed before FerretDB.
//
// FerretDB 1.24 implements findAndModify and update as read, modify in Go, write back by _id,
// without re-checking the filter, so two concurrent claims can take the same document.
// The front forwards one command at a time across all client connections, which makes every
// command linearizable: each client connection gets its own backend connection (so cursors
// and per-connection state stay where FerretDB expects them), but only the holder of exchangeMu
// may have a command in flight.
type front struct {
	backendAddr string
	logger      *slog.Logger

	// exchangeMu is held from writing a request to the backend until its reply has been read.
	exchangeMu sync.Mutex

	// streams serves change streams; nil when they are off, and then the front passes
	// $changeStream on to FerretDB, which refuses it.
	streams *streams
	// reader is the front's own backend connection, for the streams' reads; used under exchangeMu.
	reader backendClient
	// locks sums the time commands hold exchangeMu, for a lock report; nil when none is asked.
	locks      *lockReport
	locksEvery time.Duration
	// stopStreams ends the streams' service when serve returns.
	stopStreams context.CancelFunc

	wg sync.WaitGroup // one per connection handler

	connsMu sync.Mutex
	conns   map[net.Conn]struct{} // every open client and backend connection, closed on shutdown
	closed  bool                  // set on shutdown; no new connection may be tracked after it
}

// newFront returns a front before backendAddr; with streams nil, it serves no change streams.
func newFront(backendAddr string, logger *slog.Logger, streams *streamConfig) *front {
	f := &front{
		backendAddr: backendAddr,
		logger:      logger,
		conns:       make(map[net.Conn]struct{}),
	}
	f.reader.f = f
	if streams != nil {
		f.streams = newStreams(*streams, &f.exchangeMu, logger)
	}
	return f
}

// serve accepts client connections on ln until ctx is done or accepting fails for good.
// Before returning it closes ln and every connection and waits for all handlers, so no
// goroutine outlives it.
func (f *front) serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()

	if f.streams != nil {
		streamsCtx, stopStreams := context.WithCancel(ctx)
		f.stopStreams = stopStreams
		f.wg.Go(func() { f.streams.run(streamsCtx) })
	}

	reportCtx, stopReport := context.WithCancel(ctx)
	if f.locks != nil {
		f.wg.Go(func() { f.locks.run(reportCtx, f.locksEvery, f.logger) })
	}

	err := f.acceptLoop(ctx, ln)

	stopReport()
	_ = ln.Close()
	f.closeAll()
	if f.stopStreams != nil {
		f.stopStreams() // a getMore waiting for events returns at once
	}
	f.wg.Wait()

	return err
}

func (f *front) acceptLoop(ctx context.Context, ln net.Listener) error {
	for {
		client, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}

			// Running out of file descriptors and the like is transient: wait and go on,
			// as net/http does, rather than taking the whole server down.
			if isTemporary(err) {
				f.logger.WarnContext(ctx, "front: accept failed, retrying", slog.Any("error", err))
				time.Sleep(50 * time.Millisecond)
				continue
			}

			return fmt.Errorf("front: accept: %w", err)
		}

		if !f.track(client) {
			return nil // shutting down
		}

		f.wg.Go(func() { f.handle(ctx, client) })
	}
}

// isTemporary reports whether an Accept error is worth retrying.
func isTemporary(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// track registers c so that shutdown can close it. It closes c and returns false
// if shutdown has already begun.
func (f *front) track(c net.Conn) bool {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()

	if f.closed {
		_ = c.Close()
		return false
	}

	f.conns[c] = struct{}{}

	return true
}

// release closes c and forgets it.
func (f *front) release(c net.Conn) {
	f.connsMu.Lock()
	delete(f.conns, c)
	f.connsMu.Unlock()

	_ = c.Close()
}

// closeAll closes every tracked connection. Closing unblocks any handler waiting in a read or
// write, including one that holds exchangeMu while it waits for the backend's reply.
func (f *front) closeAll() {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()

	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}

// handle relays messages between one client and its own backend connection until either side
// closes or fails.
func (f *front) handle(ctx context.Context, client net.Conn) {
	defer f.release(client)

	var d net.Dialer
	backend, err := d.DialContext(ctx, "tcp", f.backendAddr)
	if err != nil {
		f.logError(ctx, "front: dial backend", err)
		return
	}
	if !f.track(backend) {
		return
	}
	defer f.release(backend)

	if err := f.relay(client, backend); err != nil {
		f.logError(ctx, "front: relay", err)
	}
}

// relay is the request loop of one client connection. It returns nil when the client hangs up
// between messages.
func (f *front) relay(client, backend net.Conn) error {
	clientR := bufio.NewReader(client)
	backendR := bufio.NewReader(backend)

	for {
		req, err := readMessage(clientR)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read request: %w", err)
		}

		replies, err := f.answer(backend, backendR, req)
		if err != nil {
			return err
		}

		// Answer the client after releasing exchangeMu, so a slow client delays nobody else.
		for _, reply := range replies {
			if _, err := client.Write(reply); err != nil {
				return fmt.Errorf("write reply: %w", err)
			}
		}
	}
}

// answer returns the replies to req: from the change streams when req is theirs (they take
// the lock only to open a stream, never to wait for events), from the parts of a $unionWith
// (see unionwith.go), else from the backend.
func (f *front) answer(backend net.Conn, backendR *bufio.Reader, req []byte) ([][]byte, error) {
	if f.streams != nil {
		if reply, ok := f.streams.answer(req); ok {
			if reply == nil {
				return nil, nil
			}
			return [][]byte{reply}, nil
		}
	}
	if u, err, ok := parseUnionAggregate(req); ok {
		return f.answerUnion(u, err), nil
	}
	if unlocked(req) {
		return f.forward(backend, backendR, req)
	}
	return f.exchange(backend, backendR, req)
}

// unlockedCommands read no data and change none: the front forwards them without its lock, as a
// MongoDB server answers them beside whatever else it runs. A hello queued behind the lock
// answered with a localTime taken at the end of its wait, where a client takes it as taken half
// way through the round trip: on a busy server every client's estimate of the server's clock ran
// ahead by half the queue, and a worker judged other workers' leases lapsed that early.
var unlockedCommands = []string{"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo"}

// unlocked says req is one of unlockedCommands.
func unlocked(req []byte) bool {
	return slices.Contains(unlockedCommands, peekCommandName(req))
}

// exchange sends req to the backend and reads what the backend answers to it, holding the one
// global lock for the whole round trip. It returns the replies to pass on to the client.
func (f *front) exchange(backend net.Conn, backendR *bufio.Reader, req []byte) ([][]byte, error) {
	var kind string // for the lock report, named before the lock is taken
	if f.locks != nil {
		kind = f.locks.kindOf(req)
	}
	f.exchangeMu.Lock()
	defer f.exchangeMu.Unlock()
	var covered time.Duration // spent reading for change streams
	began := time.Now()
	req, keyed, images := f.keyWrites(req)
	if f.locks != nil {
		defer func() { f.locks.add(kindByKey(kind, keyed), time.Since(began), covered) }()
	}

	// A write that a change stream covers is read before and after, under the same lock; what
	// keyWrites read whole just now is not read again.
	write := f.streams.watch(req)
	if write != nil {
		began := time.Now()
		write.know(images)
		write.beforeErr = write.before(&f.reader)
		covered += time.Since(began)
	}

	return f.forwardWith(backend, backendR, req, func(reply []byte) {
		if write != nil {
			began := time.Now()
			f.streams.record(write, reply, &f.reader)
			covered += time.Since(began)
		}
	})
}

// forward sends req to the backend and reads what the backend answers to it, without the lock.
func (f *front) forward(backend net.Conn, backendR *bufio.Reader, req []byte) ([][]byte, error) {
	return f.forwardWith(backend, backendR, req, func([]byte) {})
}

// forwardWith sends req to the backend and returns the replies to pass on to the client; answered
// hears the backend's first reply before anything else is done with it.
func (f *front) forwardWith(backend net.Conn, backendR *bufio.Reader, req []byte, answered func(reply []byte)) ([][]byte, error) {
	if _, err := backend.Write(req); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}

	reply, err := readMessage(backendR)
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	answered(reply)

	// A client that sets moreToCome (an unacknowledged write) expects no reply. FerretDB 1.24
	// ignores the flag and answers every message anyway (internal/clientconn/conn.go), so the
	// front reads that answer and drops it: passing it on would confuse the client, and leaving
	// it unread would shift every later reply on this connection by one. Reading it also means
	// the write has finished before the lock is released, which keeps it linearizable.
	if hasMoreToCome(req) {
		return nil, nil
	}

	replies := [][]byte{reply}

	// A reply with moreToCome (an exhaust cursor or streaming hello) is followed by more replies
	// with no further request. FerretDB 1.24 never sends one, but relaying them keeps the framing
	// right if it ever did.
	for hasMoreToCome(reply) {
		if reply, err = readMessage(backendR); err != nil {
			return nil, fmt.Errorf("read reply: %w", err)
		}
		replies = append(replies, reply)
	}

	return replies, nil
}

// logError logs err unless it is the ordinary end of a connection (peer gone, or shutdown).
func (f *front) logError(ctx context.Context, msg string, err error) {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || ctx.Err() != nil {
		f.logger.DebugContext(ctx, msg, slog.Any("error", err))
		return
	}

	f.logger.WarnContext(ctx, msg, slog.Any("error", err))
}

// readMessage reads one complete wire message, header included.
// It returns io.EOF only if r ended cleanly before the first byte of a message.
func readMessage(r io.Reader) ([]byte, error) {
	var header [headerLen]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}

	n := int32(binary.LittleEndian.Uint32(header[:4]))
	if n < headerLen || n > maxMessageLen {
		return nil, fmt.Errorf("invalid message length %d", n)
	}

	msg := make([]byte, n)
	copy(msg, header[:])
	if _, err := io.ReadFull(r, msg[headerLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // EOF inside a message is never clean
		}
		return nil, err
	}

	return msg, nil
}

// hasMoreToCome reports whether msg is an OP_MSG with the moreToCome flag set.
// The uint32 flagBits follows the header directly.
func hasMoreToCome(msg []byte) bool {
	if len(msg) < headerLen+4 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return false
	}

	return binary.LittleEndian.Uint32(msg[headerLen:headerLen+4])&flagMoreToCome != 0
}
