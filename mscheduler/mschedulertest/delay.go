package mschedulertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A Delay chooses how long a DelayProxy holds a command before it
// forwards it: by the command's name, and the time since the proxy
// started.
type Delay func(command string, elapsed time.Duration) time.Duration

// FixedDelay holds every command for d.
func FixedDelay(d time.Duration) Delay {
	return func(string, time.Duration) time.Duration { return d }
}

// RandomDelay holds each command for a time drawn evenly from [lo, hi].
func RandomDelay(lo, hi time.Duration) Delay {
	return func(string, time.Duration) time.Duration {
		return lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
	}
}

// GrowingDelay holds each command for a time that grows evenly from from
// to to over the first over of the proxy's life, then stays at to.
func GrowingDelay(from, to, over time.Duration) Delay {
	return func(_ string, elapsed time.Duration) time.Duration {
		if over <= 0 || elapsed >= over {
			return to
		}
		return from + time.Duration(float64(to-from)*float64(elapsed)/float64(over))
	}
}

// ParseDelay reads a delay as a flag gives it: "1s" (fixed), "300ms-800ms"
// (random in the range), or "0s..2s/1m" (growing from 0 s to 2 s over a
// minute).
func ParseDelay(s string) (Delay, error) {
	s = strings.TrimSpace(s)
	if from, rest, ok := strings.Cut(s, ".."); ok {
		to, over, ok := strings.Cut(rest, "/")
		if !ok {
			return nil, fmt.Errorf("delay %q: a growing delay is FROM..TO/OVER, say 0s..2s/1m", s)
		}
		d, err := durations(from, to, over)
		if err != nil {
			return nil, fmt.Errorf("delay %q: %w", s, err)
		}
		return GrowingDelay(d[0], d[1], d[2]), nil
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok && lo != "" {
		d, err := durations(lo, hi)
		if err != nil {
			return nil, fmt.Errorf("delay %q: %w", s, err)
		}
		if d[1] < d[0] {
			return nil, fmt.Errorf("delay %q: the range ends before it starts", s)
		}
		return RandomDelay(d[0], d[1]), nil
	}
	d, err := durations(s)
	if err != nil {
		return nil, fmt.Errorf("delay %q: %w", s, err)
	}
	return FixedDelay(d[0]), nil
}

func durations(ss ...string) ([]time.Duration, error) {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("%s is negative", s)
		}
		out[i] = d
	}
	return out, nil
}

// DelayProxy stands between MongoDB clients and a server and holds each
// command for a time its Delay chooses before it forwards it: a slow
// server, for tests and the benchmark. Commands on different connections
// are held at once, as a busy server holds them; one connection's commands
// go in order. Replies pass as they come (a streaming hello's too).
type DelayProxy struct {
	relays *relays
	delay  Delay
	began  time.Time
}

// StartDelayProxy starts a proxy in front of the server at target
// (host:port), on a free port of the loopback interface.
func StartDelayProxy(target string, delay Delay) (*DelayProxy, error) {
	r, err := listenRelays(target)
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{relays: r, delay: delay, began: time.Now()}
	r.start(func(_ int, c, s net.Conn) { p.serve(c, s) })
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *DelayProxy) Addr() string { return p.relays.addr() }

// URI is a connection string that reaches the server through the proxy.
func (p *DelayProxy) URI() string { return "mongodb://" + p.Addr() + "/?directConnection=true" }

// Close stops the proxy and closes every connection through it.
func (p *DelayProxy) Close() { p.relays.close(nil) }

// serve relays one connection: each request held, then forwarded, and its
// replies passed back (several for a request whose reply streams).
func (p *DelayProxy) serve(c, s net.Conn) {
	for {
		req, err := readWireMessage(c)
		if err != nil {
			return
		}
		if d := p.delay(commandName(req), time.Since(p.began)); d > 0 {
			time.Sleep(d) // the slow server: this connection's command waits
		}
		if _, err := s.Write(req); err != nil {
			return
		}
		if moreToCome(req) {
			continue // no reply
		}
		for {
			reply, err := readWireMessage(s)
			if err != nil {
				return
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
			if !moreToCome(reply) {
				break
			}
		}
	}
}

// readWireMessage reads one length-prefixed wire message whole.
func readWireMessage(r io.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n < 16 || n > 64<<20 {
		return nil, errors.New("mschedulertest: bad wire message length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

const opMsgCode = 2013

// commandName is the command name of an OP_MSG request, or "".
func commandName(msg []byte) string {
	if len(msg) < 21 || binary.LittleEndian.Uint32(msg[12:16]) != opMsgCode || msg[20] != 0 {
		return ""
	}
	body := bson.Raw(msg[21:])
	if len(body) < 4 {
		return ""
	}
	if n := binary.LittleEndian.Uint32(body[:4]); int(n) <= len(body) {
		body = body[:n]
	}
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// moreToCome reports an OP_MSG whose flags say no reply follows (a
// request) or more replies follow (a streaming reply).
func moreToCome(msg []byte) bool {
	return len(msg) >= 20 && binary.LittleEndian.Uint32(msg[12:16]) == opMsgCode && binary.LittleEndian.Uint32(msg[16:20])&2 != 0
}
