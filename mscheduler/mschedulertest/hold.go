package mschedulertest

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A Command is one command a HoldProxy saw: on which of its connections,
// in which place among all it saw, its name, the collection it names, and,
// for one statement of a write command that the proxy splits, the
// statement's place.
type Command struct {
	Conn       int // the proxy's number of the client connection, from 1
	Seq        int // the command's place among all the proxy saw, from 1
	Name       string
	Collection string
	Statement  int // the statement's index in its write command, when split
	Statements int // how many statements the split command had; 0 when sent whole
	Body       bson.Raw
	// Writes are the statements of a write command (insert, update,
	// delete) as sent: one when split.
	Writes []bson.Raw
}

// monitoring are the commands a driver sends to learn of a server or a
// connection, not for an operation of its caller.
var monitoring = []string{"hello", "isMaster", "ismaster", "ping", "buildInfo", "buildinfo", "saslStart", "saslContinue", "endSessions", "getParameter"}

// Monitoring says the command is a driver's own (a hand-shake, a
// heartbeat, a session's end), not one an operation sent.
func (c Command) Monitoring() bool { return slices.Contains(monitoring, c.Name) }

// HoldPoint is where a hold stops a command: before the server sees it, or
// after the server applied it, before its reply reaches the client.
type HoldPoint int

const (
	BeforeSend HoldPoint = iota
	BeforeReply
)

// A Hold stops one command at its point until released.
type Hold struct {
	at      HoldPoint
	match   func(Command) bool
	reached chan struct{} // closed when a command is held
	release chan struct{} // closed by Release
	cmd     Command       // written before reached is closed
	once    sync.Once
}

// Reached is closed once a command is held.
func (h *Hold) Reached() <-chan struct{} { return h.reached }

// Wait waits until a command is held, and returns it.
func (h *Hold) Wait(ctx context.Context) (Command, error) {
	select {
	case <-h.reached:
		return h.cmd, nil
	case <-ctx.Done():
		return Command{}, context.Cause(ctx)
	}
}

// Release lets the held command go on, or, before one is held, disarms the
// hold.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

func (h *Hold) released() bool {
	select {
	case <-h.release:
		return true
	default:
		return false
	}
}

// HoldProxy stands between MongoDB clients and a server and can stop a
// chosen command of a chosen connection while a test acts: before the
// server sees it, or after the server applied it and before its client
// learns of it. Other connections' commands pass meanwhile, as they would
// reach a server. With Split, it also sends the statements of a write
// command one by one (see splitWrite), so that other writes and holds
// come between them, as on MongoDB. Inserts and deletes pass whole.
type HoldProxy struct {
	relays *relays
	split  bool

	mu     sync.Mutex // guards every field below; written and read by the connections' goroutines and the test's
	holds  []*Hold    // armed, not yet reached
	seq    int
	log    []Command
	closed chan struct{} // closed by Close: every hold lets go
	done   bool
}

// HoldOptions set up a HoldProxy.
type HoldOptions struct {
	// Split sends each statement of an update of several as a command of
	// its own. Defaults to false: commands pass whole.
	Split bool
}

// StartHoldProxy starts a proxy in front of the server at target
// (host:port), on a free port of the loopback interface.
func StartHoldProxy(target string, opts HoldOptions) (*HoldProxy, error) {
	r, err := listenRelays(target)
	if err != nil {
		return nil, err
	}
	p := &HoldProxy{relays: r, split: opts.Split, closed: make(chan struct{})}
	r.start(p.serve)
	return p, nil
}

// URI is a connection string that reaches the server through the proxy.
func (p *HoldProxy) URI() string { return "mongodb://" + p.relays.addr() + "/?directConnection=true" }

// Hold arms a hold on the first command from now on that match accepts.
// match is called for each command in the order the proxy sees them, one
// at a time, so it may count.
func (p *HoldProxy) Hold(at HoldPoint, match func(Command) bool) *Hold {
	h := &Hold{at: at, match: match, reached: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		h.Release()
	}
	p.holds = append(p.holds, h)
	return h
}

// Seq is the place of the last command the proxy saw: commands seen after
// it have a greater Seq.
func (p *HoldProxy) Seq() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Since returns the commands seen after place seq, in order.
func (p *HoldProxy) Since(seq int) []Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.log, seq+1, func(c Command, s int) int { return c.Seq - s })
	return slices.Clone(p.log[i:])
}

// Close stops the proxy, lets every held command go, and closes every
// connection through it.
func (p *HoldProxy) Close() {
	p.relays.close(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.done {
			p.done = true
			close(p.closed)
		}
	})
}

// seen records a command and returns the hold, if any, that takes it at
// point at.
func (p *HoldProxy) seen(cmd *Command, at HoldPoint) *Hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at == BeforeSend {
		p.seq++
		cmd.Seq = p.seq
		p.log = append(p.log, *cmd)
	}
	// A hold released before it was reached is disarmed: it takes nothing.
	p.holds = slices.DeleteFunc(p.holds, (*Hold).released)
	for i, h := range p.holds {
		if h.at == at && h.match(*cmd) {
			p.holds = slices.Delete(p.holds, i, i+1)
			h.cmd = *cmd
			close(h.reached)
			return h
		}
	}
	return nil
}

// stop holds cmd at point at if a hold takes it, until released or the
// proxy closes.
func (p *HoldProxy) stop(cmd *Command, at HoldPoint) {
	if h := p.seen(cmd, at); h != nil {
		select {
		case <-h.release:
		case <-p.closed:
		}
	}
}

// serve relays one connection.
func (p *HoldProxy) serve(conn int, c, s net.Conn) {
	for {
		req, err := readWireMessage(c)
		if err != nil {
			return
		}
		if err := p.relay(conn, req, c, s); err != nil {
			return
		}
	}
}

// relay passes one request and its replies, split and held as armed.
func (p *HoldProxy) relay(conn int, req []byte, c, s net.Conn) error {
	m, err := parseOpMsg(req)
	if err != nil {
		return p.passWhole(Command{Conn: conn}, req, c, s) // a legacy hand-shake
	}
	if parts := p.splitOf(m); parts != nil {
		return p.passSplit(conn, m, parts, c, s)
	}
	cmd := Command{Conn: conn, Name: firstKey(m.body), Collection: collectionOf(m.body), Body: m.body, Writes: statementsOf(m)}
	return p.passWhole(cmd, req, c, s)
}

func (p *HoldProxy) splitOf(m *opMsg) [][]byte {
	if !p.split || m.flags&flagMoreToCome != 0 {
		return nil
	}
	return splitWrite(m)
}

// passWhole forwards req and passes its replies back (several for a reply
// that streams).
func (p *HoldProxy) passWhole(cmd Command, req []byte, c, s net.Conn) error {
	p.stop(&cmd, BeforeSend)
	if _, err := s.Write(req); err != nil {
		return err
	}
	if moreToCome(req) {
		return nil
	}
	first := true
	for {
		reply, err := readWireMessage(s)
		if err != nil {
			return err
		}
		if first {
			p.stop(&cmd, BeforeReply)
			first = false
		}
		if _, err := c.Write(reply); err != nil {
			return err
		}
		if !moreToCome(reply) {
			return nil
		}
	}
}

// passSplit sends each statement of m as a command of its own, then
// answers the client once for the whole command.
func (p *HoldProxy) passSplit(conn int, m *opMsg, parts [][]byte, c, s net.Conn) error {
	var w writeReply
	inOrder := ordered(m.body)
	for i, body := range parts {
		cmd := Command{Conn: conn, Name: firstKey(m.body), Collection: collectionOf(m.body), Statement: i, Statements: len(parts), Body: body, Writes: statementsOf(&opMsg{body: body})}
		p.stop(&cmd, BeforeSend)
		if _, err := s.Write(encodeOpMsg(m.requestID, 0, body)); err != nil {
			return err
		}
		reply, err := readWireMessage(s)
		if err != nil {
			return err
		}
		p.stop(&cmd, BeforeReply)
		rb, err := replyBody(reply)
		if err != nil {
			return statementErr(i, err)
		}
		if !w.add(i, rb, inOrder) {
			break
		}
	}
	body, err := w.body()
	if err != nil {
		return err
	}
	_, err = c.Write(encodeOpMsg(0, m.requestID, body))
	return err
}

// OnCollection accepts the commands an operation sends that name the
// collection coll (and, with names, only those commands).
func OnCollection(coll string, names ...string) func(Command) bool {
	return func(c Command) bool {
		return !c.Monitoring() && c.Collection == coll && (len(names) == 0 || slices.Contains(names, c.Name))
	}
}

// Updating accepts the commands on collection coll that change field (a
// dotted path, as the update names it, or a path under it) by any
// operator: an update one of whose statements does, or a findAndModify.
func Updating(coll, field string) func(Command) bool {
	return func(c Command) bool {
		if c.Monitoring() || c.Collection != coll {
			return false
		}
		switch c.Name {
		case "update":
			return slices.ContainsFunc(c.Writes, func(stmt bson.Raw) bool { return changes(stmt.Lookup("u"), field) })
		case "findAndModify":
			return changes(c.Body.Lookup("update"), field)
		}
		return false
	}
}

// changes says an update document changes field or a path under it.
func changes(update bson.RawValue, field string) bool {
	u, ok := update.DocumentOK()
	if !ok {
		return false
	}
	ops, _ := u.Elements()
	for _, op := range ops {
		fields, ok := op.Value().DocumentOK()
		if !ok {
			continue
		}
		paths, _ := fields.Elements()
		for _, p := range paths {
			if k := p.Key(); k == field || strings.HasPrefix(k, field+".") {
				return true
			}
		}
	}
	return false
}

// Nth accepts the n-th command (from 1) that match accepts, counting from
// when its hold is armed.
func Nth(n int, match func(Command) bool) func(Command) bool {
	seen := 0
	return func(c Command) bool {
		if !match(c) {
			return false
		}
		seen++
		return seen == n
	}
}
