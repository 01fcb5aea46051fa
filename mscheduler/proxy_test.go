package mscheduler_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// cmdProxy stands between a client and the server and lets a test act on
// each command on its way: delay it, run code before it is forwarded, or
// forward it and drop its reply (the connection then closes, as when the
// network fails after the server applied the command).
type cmdProxy struct {
	ln     net.Listener
	target string
	// hook is called with each command (its name and body) before it is
	// forwarded; it may block. It returns true to drop the reply.
	hook func(name string, body bson.Raw) (dropReply bool)
	// dropIf, when set before the client is used, is called with each
	// command and its reply; it returns true to drop the reply.
	dropIf func(name string, body, reply bson.Raw) bool
	// failIf, when set before the client is used, is called with each
	// command; it returns true to answer it with an error (a time limit
	// exceeded) without forwarding it: the command fails, the server never
	// sees it, and the connection stays up.
	failIf func(name string, body bson.Raw) bool

	mu    sync.Mutex
	conns []net.Conn
}

// singleHost is the test server's host:port, or skips the test when the
// server URI names several hosts (a replica set): a proxy stands in front
// of one.
func singleHost(t *testing.T) string {
	t.Helper()
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the proxy stands in front of a single-host server", len(hosts))
	}
	return hosts[0]
}

// newCmdProxy starts a proxy in front of the test server and returns a
// client that talks through it, or skips the test for a multi-host server.
func newCmdProxy(t *testing.T, hook func(name string, body bson.Raw) bool) (*cmdProxy, *mongo.Client) {
	t.Helper()
	target := singleHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cmdProxy{ln: ln, target: target, hook: hook}
	go p.accept()
	t.Cleanup(p.close)
	client := mschedulertest.NewClient(t, options.Client().SetHosts([]string{ln.Addr().String()}).SetDirect(true))
	return p, client
}

func (p *cmdProxy) accept() {
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
		go p.serve(c, s)
	}
}

// serve relays one connection, one request and one reply at a time (the
// driver sends no other traffic on a connection in use).
func (p *cmdProxy) serve(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	for {
		req, err := readMessage(c)
		if err != nil {
			return
		}
		drop := false
		name, body, isCmd := commandOf(req)
		if isCmd && p.failIf != nil && p.failIf(name, body) {
			if _, err := c.Write(errorReply(req)); err != nil {
				return
			}
			continue
		}
		if isCmd && p.hook != nil {
			drop = p.hook(name, body)
		}
		if _, err := s.Write(req); err != nil {
			return
		}
		if moreToCome(req) {
			continue
		}
		reply, err := readMessage(s)
		if err != nil || drop {
			return
		}
		if _, replyBody, ok := commandOf(reply); ok && isCmd && p.dropIf != nil && p.dropIf(name, body, replyBody) {
			return
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

func (p *cmdProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// errorReply is an OP_MSG reply to req saying the server gave up on it
// (ExceededTimeLimit: no error that makes the driver drop its pool).
func errorReply(req []byte) []byte {
	doc, _ := bson.Marshal(bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "refused by the test proxy"},
		{Key: "code", Value: int32(262)}, {Key: "codeName", Value: "ExceededTimeLimit"}})
	msg := make([]byte, 21, 21+len(doc))
	binary.LittleEndian.PutUint32(msg[8:12], binary.LittleEndian.Uint32(req[4:8])) // responseTo
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	msg = append(msg, doc...) // flags 0, then section kind 0
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	return msg
}

// readMessage reads one length-prefixed wire message whole.
func readMessage(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n < 16 || n > 64<<20 {
		return nil, errors.New("bad message length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

const opMsg = 2013

// commandOf returns the command name and body of an OP_MSG request, with
// its document sequences (the statements of an update, say) appended to
// the body as arrays, as if they had been sent inline.
func commandOf(msg []byte) (string, bson.Raw, bool) {
	if len(msg) < 21 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg || msg[20] != 0 {
		return "", nil, false
	}
	body := bson.Raw(msg[21:])
	if len(body) < 4 {
		return "", nil, false
	}
	body = body[:binary.LittleEndian.Uint32(body[:4])]
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return "", nil, false
	}
	end := len(msg)
	if binary.LittleEndian.Uint32(msg[16:20])&1 != 0 { // a checksum follows the sections
		end -= 4
	}
	if rest := msg[21+len(body) : end]; len(rest) > 0 {
		body = withSequences(body, rest)
	}
	return elems[0].Key(), body, true
}

// withSequences appends the kind 1 sections of an OP_MSG (each an
// identifier and its documents) to body as arrays.
func withSequences(body bson.Raw, sections []byte) bson.Raw {
	var doc bson.D
	if err := bson.Unmarshal(body, &doc); err != nil {
		return body
	}
	for len(sections) > 5 && sections[0] == 1 {
		size := int(binary.LittleEndian.Uint32(sections[1:5]))
		if size < 5 || 1+size > len(sections) {
			break
		}
		seq := sections[5 : 1+size]
		sections = sections[1+size:]
		nul := bytes.IndexByte(seq, 0)
		if nul < 0 {
			break
		}
		var docs bson.A
		for rest := seq[nul+1:]; len(rest) >= 4; {
			n := int(binary.LittleEndian.Uint32(rest[:4]))
			if n < 5 || n > len(rest) {
				break
			}
			docs = append(docs, bson.Raw(rest[:n]))
			rest = rest[n:]
		}
		doc = append(doc, bson.E{Key: string(seq[:nul]), Value: docs})
	}
	out, err := bson.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// moreToCome reports an OP_MSG with no reply.
func moreToCome(msg []byte) bool {
	return len(msg) >= 20 && binary.LittleEndian.Uint32(msg[12:16]) == opMsg && binary.LittleEndian.Uint32(msg[16:20])&2 != 0
}

// filterOf is the filter of a findAndModify command, as sent.
func filterOf(name string, body bson.Raw) bson.Raw {
	if name == "findAndModify" {
		f, _ := body.Lookup("query").DocumentOK()
		return f
	}
	return nil
}

// isRunEnd reports whether a command writes the end of runs of worker:
// an update of the tasks that neither claims nor renews a lease.
func isRunEnd(name string, body bson.Raw, worker string) bool {
	return name == "update" && !isClaim(name, body) &&
		body.Lookup("updates", "0", "u", "$set", "holders."+worker+".lease_until").Type == 0 &&
		body.Lookup("updates", "0", "q", "holders."+worker+".run").Type != 0
}

// isClaim reports whether a command claims tasks: a single claim, or a
// batch claim's update.
func isClaim(name string, body bson.Raw) bool {
	switch name {
	case "findAndModify":
		return filterOf(name, body).Lookup("free").Type != 0
	case "update": // its first statement's filter
		return body.Lookup("updates", "0", "q", "done_by").Type != 0
	}
	return false
}
