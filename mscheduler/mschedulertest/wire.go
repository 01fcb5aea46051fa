package mschedulertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The parts of the MongoDB wire protocol the proxies read and write: an
// OP_MSG is a 16-byte header (length, request id, response to, op code),
// a uint32 of flags, then sections: kind 0 is the command's body, kind 1 a
// named sequence of documents (a write command's statements, as drivers
// send them).

const (
	wireHeaderLen    = 16
	flagChecksum     = 1 << 0
	flagMoreToCome   = 1 << 1
	sectionBody      = 0
	sectionSequence  = 1
	checksumTrailing = 4
)

// opMsg is a decoded OP_MSG request: its body, and its document sequences
// by identifier.
type opMsg struct {
	requestID int32
	flags     uint32
	body      bson.Raw
	sequences map[string][]bson.Raw
}

// parseOpMsg decodes msg, or reports that it is not an OP_MSG it can read.
func parseOpMsg(msg []byte) (*opMsg, error) {
	if len(msg) < wireHeaderLen+5 || binary.LittleEndian.Uint32(msg[12:16]) != opMsgCode {
		return nil, errors.New("not an OP_MSG")
	}
	m := &opMsg{
		requestID: int32(binary.LittleEndian.Uint32(msg[4:8])),
		flags:     binary.LittleEndian.Uint32(msg[16:20]),
		sequences: map[string][]bson.Raw{},
	}
	rest := msg[20:]
	if m.flags&flagChecksum != 0 {
		rest = rest[:len(rest)-checksumTrailing]
	}
	for len(rest) > 0 {
		kind := rest[0]
		rest = rest[1:]
		if len(rest) < 4 {
			return nil, errors.New("short section")
		}
		n := int(binary.LittleEndian.Uint32(rest[:4]))
		if n < 4 || n > len(rest) {
			return nil, errors.New("bad section length")
		}
		switch kind {
		case sectionBody:
			m.body = bson.Raw(rest[:n])
		case sectionSequence:
			id, docs, err := parseSequence(rest[4:n])
			if err != nil {
				return nil, err
			}
			m.sequences[id] = docs
		default:
			return nil, fmt.Errorf("section kind %d", kind)
		}
		rest = rest[n:]
	}
	if m.body == nil {
		return nil, errors.New("no body")
	}
	return m, nil
}

// parseSequence reads a kind 1 section after its size: a C string, then
// documents to the end.
func parseSequence(b []byte) (string, []bson.Raw, error) {
	end := 0
	for end < len(b) && b[end] != 0 {
		end++
	}
	if end == len(b) {
		return "", nil, errors.New("unterminated sequence identifier")
	}
	id, b := string(b[:end]), b[end+1:]
	var docs []bson.Raw
	for len(b) > 0 {
		if len(b) < 4 {
			return "", nil, errors.New("short document in sequence")
		}
		n := int(binary.LittleEndian.Uint32(b[:4]))
		if n < 5 || n > len(b) {
			return "", nil, errors.New("bad document length in sequence")
		}
		docs = append(docs, bson.Raw(b[:n]))
		b = b[n:]
	}
	return id, docs, nil
}

// encodeOpMsg builds an OP_MSG of one body section.
func encodeOpMsg(requestID, responseTo int32, body []byte) []byte {
	n := wireHeaderLen + 4 + 1 + len(body)
	out := make([]byte, n)
	binary.LittleEndian.PutUint32(out[0:4], uint32(n))
	binary.LittleEndian.PutUint32(out[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(out[8:12], uint32(responseTo))
	binary.LittleEndian.PutUint32(out[12:16], opMsgCode)
	out[20] = sectionBody
	copy(out[21:], body)
	return out
}

// replyBody is the body of an OP_MSG reply.
func replyBody(msg []byte) (bson.Raw, error) {
	m, err := parseOpMsg(msg)
	if err != nil {
		return nil, err
	}
	return m.body, nil
}

// relays is the part every proxy here shares: it listens on a free port of
// the loopback interface, dials the server for each client connection,
// and serves each pair on a goroutine of its own until Close.
type relays struct {
	ln     net.Listener
	target string

	mu    sync.Mutex // guards conns, count and done; written by accept and close
	conns []net.Conn
	count int
	done  bool
	wg    sync.WaitGroup
}

func listenRelays(target string) (*relays, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &relays{ln: ln, target: target}, nil
}

// start accepts connections until close, serving each pair with serve
// (n counts the client connections from 1).
func (r *relays) start(serve func(n int, client, server net.Conn)) {
	r.wg.Go(func() { r.accept(serve) })
}

func (r *relays) accept(serve func(n int, client, server net.Conn)) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		if r.done {
			r.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		r.conns = append(r.conns, c, s)
		r.count++
		n := r.count
		r.mu.Unlock()
		r.wg.Go(func() {
			defer c.Close()
			defer s.Close()
			serve(n, c, s)
		})
	}
}

// addr is the proxy's address, host:port.
func (r *relays) addr() string { return r.ln.Addr().String() }

// close stops accepting, closes every connection, and waits for their
// goroutines; before, if set, runs once the proxy is marked closed (to let
// held commands go).
func (r *relays) close(before func()) {
	r.mu.Lock()
	r.done = true
	_ = r.ln.Close()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	if before != nil {
		before()
	}
	r.wg.Wait()
}
