package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/goleak"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// fakeSource is a change source the test drives.
type fakeSource struct {
	mu      sync.Mutex
	starts  int
	running bool
	changed func()
}

func (f *fakeSource) run(ctx context.Context, changed func()) {
	f.mu.Lock()
	f.starts++
	f.running, f.changed = true, changed
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.running = false
	f.mu.Unlock()
}

// change reports a change, as a change stream would.
func (f *fakeSource) change() {
	f.mu.Lock()
	changed := f.changed
	f.mu.Unlock()
	changed()
}

func (f *fakeSource) state() (starts int, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts, f.running
}

// streamWriter is a ResponseWriter that streams: what the handler wrote so
// far can be read while it runs. With block set, writes wait for it.
type streamWriter struct {
	header http.Header
	block  chan struct{}

	mu   sync.Mutex
	code int
	sent http.Header // the header as sent
	body bytes.Buffer
}

func newStreamWriter() *streamWriter { return &streamWriter{header: http.Header{}} }

func (s *streamWriter) Header() http.Header { return s.header }

func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.code == 0 {
		s.code, s.sent = code, s.header.Clone()
	}
}

func (s *streamWriter) status() (int, http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.sent
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.block != nil {
		<-s.block
	}
	s.WriteHeader(http.StatusOK)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body.Write(p)
}

func (s *streamWriter) Flush() { s.WriteHeader(http.StatusOK) }

func (s *streamWriter) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body.String()
}

// changes counts the change events written.
func (s *streamWriter) changes() int { return strings.Count(s.text(), "event: change\n") }

// page is one page connected to the events of ev, in a goroutine.
type page struct {
	w      *streamWriter
	cancel context.CancelFunc
	done   chan struct{}
}

func connect(t *testing.T, ev *events, w *streamWriter) *page {
	ctx, cancel := context.WithCancel(t.Context())
	p := &page{w: w, cancel: cancel, done: make(chan struct{})}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events", nil)
	go func() {
		defer close(p.done)
		ev.serve(w, req)
	}()
	return p
}

func (p *page) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestHubCoalescesAndShares drives the hub with a fake source on a fake
// clock (testing/synctest): one source for every page, started by the
// first and stopped by the last; at most one change event per page per
// window, the changes of the window sent at its end; a heartbeat; and a
// page that does not read never holds up the source or the other pages.
func TestHubCoalescesAndShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		ev := newEvents(src.run, MaxEventStreamsDefault)
		a := connect(t, ev, newStreamWriter())
		synctest.Wait()
		code, header := a.w.status()
		if code != http.StatusOK || !strings.HasPrefix(a.w.text(), "retry: 2000\n\n") {
			t.Fatalf("the stream opened with %d %q", code, a.w.text())
		}
		for name, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
			if got := header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		if starts, running := src.state(); starts != 1 || !running {
			t.Fatalf("after the first page: %d starts, running %v; want the source started once", starts, running)
		}
		if a.w.changes() != 0 {
			t.Fatal("a change event before any change")
		}

		for range 5 {
			src.change()
		}
		synctest.Wait()
		if n := a.w.changes(); n != 1 {
			t.Fatalf("5 changes at once gave %d events, want 1", n)
		}
		src.change()
		time.Sleep(coalesceWindow - time.Millisecond)
		synctest.Wait()
		if n := a.w.changes(); n != 1 {
			t.Fatalf("a change within the window was sent at once (%d events)", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := a.w.changes(); n != 2 {
			t.Fatalf("the change held during the window gave %d events at its end, want 2 in all", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := a.w.changes(); n != 2 {
			t.Fatalf("%d events with no change since, want 2", n)
		}
		src.change()
		synctest.Wait()
		if n := a.w.changes(); n != 3 {
			t.Fatalf("a change after a quiet window gave %d events, want 3 at once", n)
		}

		time.Sleep(heartbeatInterval)
		synctest.Wait()
		if !strings.Contains(a.w.text(), "\n: heartbeat\n\n") {
			t.Fatalf("no heartbeat after %s: %q", heartbeatInterval, a.w.text())
		}

		// A second page shares the source; a third one that never reads
		// holds nothing up.
		b := connect(t, ev, newStreamWriter())
		slow := newStreamWriter()
		slow.block = make(chan struct{})
		c := connect(t, ev, slow)
		synctest.Wait()
		for range 10 {
			src.change() // would block forever if the hub waited for c
			time.Sleep(coalesceWindow)
		}
		synctest.Wait()
		if starts, _ := src.state(); starts != 1 {
			t.Fatalf("three pages started the source %d times, want 1", starts)
		}
		if na, nb := a.w.changes(), b.w.changes(); na != 13 || nb != 10 {
			t.Fatalf("beside a page that does not read, the others got %d and %d events, want 13 and 10", na, nb)
		}

		// The source runs until the last page leaves, and again for the
		// next one.
		a.cancel()
		b.cancel()
		synctest.Wait()
		if !a.ended() || !b.ended() {
			t.Fatal("a page's stream did not end with its request")
		}
		if _, running := src.state(); !running || !ev.hub.running() {
			t.Fatal("the source stopped while a page still listens")
		}
		c.cancel()
		close(slow.block)
		synctest.Wait()
		if !c.ended() {
			t.Fatal("the slow page's stream did not end")
		}
		if _, running := src.state(); running || ev.hub.running() {
			t.Fatal("the source runs on with no page")
		}
		d := connect(t, ev, newStreamWriter())
		synctest.Wait()
		if starts, running := src.state(); starts != 2 || !running {
			t.Fatalf("a page after the last left: %d starts, running %v; want a second start", starts, running)
		}
		d.cancel()
		synctest.Wait()
		// synctest.Test fails if any goroutine of the hub is left.
	})
}

// TestStreamDetection: the first refusal of a change stream by the server
// means it has none; a network error or a timeout, or a refusal once a
// stream has opened, is a failure to try again.
func TestStreamDetection(t *testing.T) {
	refusal := mongo.CommandError{Code: 40324, Name: "Location40324", Message: "Unrecognized pipeline stage name: '$changeStream'"}
	network := mongo.CommandError{Code: 6, Message: "connection reset", Labels: []string{"NetworkError"}}
	for _, tc := range []struct {
		name     string
		err      error
		streamed bool
		want     bool
	}{
		{"refused", refusal, false, true},
		{"wrapped refusal", errors.Join(errors.New("watch"), refusal), false, true},
		{"network", network, false, false},
		{"timeout", context.DeadlineExceeded, false, false},
		{"refused after a stream", refusal, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &dbSource{d: &Dashboard{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}}
			s.streamed.Store(tc.streamed)
			s.failed(tc.err)
			if got := s.noStreams.Load(); got != tc.want {
				t.Fatalf("no change streams = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStreamPipeline: the stream keeps the task collections and the worker
// registry, and, when the collections are discovered, any metadata; a
// change to the metadata of one not followed yet reopens the stream.
func TestStreamPipeline(t *testing.T) {
	event := func(coll string) bson.Raw {
		raw, err := bson.Marshal(bson.D{{Key: "ns", Value: bson.D{{Key: "db", Value: "x"}, {Key: "coll", Value: coll}}}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	names := []string{"emails"}
	for coll, want := range map[string]bool{"emails": false, "emails.meta": false, "reports.meta": true, "reports": false, mscheduler.WorkersCollection: false} {
		if got := isNewCollection(event(coll), names); got != want {
			t.Errorf("isNewCollection(%q) = %v, want %v", coll, got, want)
		}
	}
	fixed := bson.D(streamPipeline(names, false)[0])
	wantFixed := bson.D{{Key: "$match", Value: bson.D{{Key: "ns.coll", Value: bson.D{{Key: "$in", Value: []string{"emails", mscheduler.WorkersCollection}}}}}}}
	if !equalJSON(t, fixed, wantFixed) {
		t.Errorf("fixed collections: %v, want %v", fixed, wantFixed)
	}
	if discovered := streamPipeline(names, true); !strings.Contains(mustJSON(t, discovered), `\\.meta$`) {
		t.Errorf("discovered collections: %s does not follow new metadata", mustJSON(t, discovered))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func equalJSON(t *testing.T, a, b any) bool { return mustJSON(t, a) == mustJSON(t, b) }

// sse is one event read from a stream, or a comment.
type sse struct {
	name string
	at   time.Time
}

// readEvents reads the events of body until it ends; the channel closes
// then.
func readEvents(body io.Reader) <-chan sse {
	out := make(chan sse, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case line == "" && name != "":
				out <- sse{name: name, at: time.Now()}
				name = ""
			}
		}
	}()
	return out
}

// openEvents connects to url's events with a request the test can end.
func openEvents(t *testing.T, client *http.Client, url, token string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, func() { cancel(); _ = resp.Body.Close() }
}

// TestEventsOnTheServer: a page connected to a dashboard on the test server
// gets change events (from the change stream, or on a server without them
// from the 2 s tick, the server's lack of change streams found once), at
// most one per window; when the page goes away, its stream ends and the
// hub's goroutines stop.
func TestEventsOnTheServer(t *testing.T) {
	ctx := t.Context()
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	streams := mschedulertest.HasChangeStreams(ctx, coll)
	var log mschedulertest.Buffer
	d, err := New(coll.Database(), &Config{Collections: []string{coll.Name()}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.ServeHTTP(w, r)
		ended <- r.URL.Path
	}))
	leaks := goleak.IgnoreCurrent()
	defer func() {
		srv.Close()
		goleak.VerifyNone(t, leaks)
	}()

	for round := range 2 {
		resp, leave := openEvents(t, srv.Client(), srv.URL, "")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
			resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Accel-Buffering") != "no" {
			leave()
			t.Fatalf("events answered %s with %v", resp.Status, resp.Header)
		}
		events := readEvents(resp.Body)
		var got []sse
		deadline := time.After(3*tickInterval + time.Second)
		want := 2 - round // the second round only checks that the stream works again
	read:
		for len(got) < want {
			if streams && len(got) == 1 {
				if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "poke"}, {Key: "round", Value: round}}); err != nil && !mongo.IsDuplicateKeyError(err) {
					t.Fatal(err)
				}
				_, _ = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "poke"}})
			}
			select {
			case e, ok := <-events:
				if !ok {
					break read
				}
				if e.name != "change" {
					t.Fatalf("an event %q, want change", e.name)
				}
				got = append(got, e)
			case <-deadline:
				break read
			}
		}
		if len(got) < want {
			leave()
			t.Fatalf("round %d: %d change events in %s, want %d (change streams: %v)", round, len(got), 3*tickInterval+time.Second, want, streams)
		}
		if gap := got[len(got)-1].at.Sub(got[0].at); len(got) == 2 && gap < coalesceWindow-100*time.Millisecond {
			t.Errorf("two change events %s apart, within one window of %s", gap, coalesceWindow)
		}
		leave()
		for range events { // the reader ends with the body
		}
		select {
		case path := <-ended:
			if path != "/events" {
				t.Fatalf("%s ended, want /events", path)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end when its page went away")
		}
	}
	if n := strings.Count(log.String(), "no change streams on this server"); streams && n != 0 || !streams && n != 1 {
		t.Fatalf("the server's lack of change streams was found %d times in two connections (change streams: %v); log:\n%s", n, streams, log.String())
	}
}

// TestEventsNeedToken: the stream is behind the dashboard's token like
// every page, and read-only mode serves it.
func TestEventsNeedToken(t *testing.T) {
	coll := mschedulertest.Collection(t)
	d, err := New(coll.Database(), &Config{Collections: []string{coll.Name()}, Token: "s3cret", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, token := range []string{"", "wrong"} {
		resp, leave := openEvents(t, srv.Client(), srv.URL, token)
		leave()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("events with token %q: %s, want 401", token, resp.Status)
		}
	}
	resp, leave := openEvents(t, srv.Client(), srv.URL, "s3cret")
	defer leave()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events with the token: %s %q, want 200 text/event-stream", resp.Status, resp.Header.Get("Content-Type"))
	}
}

// TestEventsEndOnShutdown: http.Server.Shutdown waits for every request to
// end; the streams end when it starts, so that it returns at once.
func TestEventsEndOnShutdown(t *testing.T) {
	coll := mschedulertest.Collection(t)
	d, err := New(coll.Database(), &Config{Collections: []string{coll.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, leave := openEvents(t, client, "http://"+ln.Addr().String(), "")
	defer leave()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %s", resp.Status)
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(shutdown); err != nil {
		t.Fatalf("Shutdown with a page connected: %v after %s", err, time.Since(start))
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
}

// TestEventsFromChangeStream: on a replica set, the hub follows one change
// stream of the database with no tick: a new task collection, a task
// published in it and a worker's heartbeat each send a change event, a
// write to another collection none.
func TestEventsFromChangeStream(t *testing.T) {
	ctx := t.Context()
	if !mschedulertest.HasChangeStreams(ctx, mschedulertest.Collection(t)) {
		t.Skip("this server has no change streams (a standalone server, the development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set): the stream path needs a replica set or the development server's emulated streams")
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	db := mschedulertest.Client().Database("mscheduler_test_events_" + hex.EncodeToString(suffix[:])) // no other test writes its worker registry
	t.Cleanup(func() { _ = db.Drop(context.Background()) })
	d, err := New(db, &Config{}) // collections discovered
	if err != nil {
		t.Fatal(err)
	}
	src := &dbSource{d: d, tick: time.Hour} // only the stream can send
	ev := newEvents(src.changes, MaxEventStreamsDefault)
	srv := httptest.NewServer(http.HandlerFunc(ev.serve))
	defer srv.Close()
	resp, leave := openEvents(t, srv.Client(), srv.URL, "")
	defer leave()
	events := readEvents(resp.Body)

	next := func(what string) {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok || e.name != "change" {
				t.Fatalf("%s: the stream ended (%v) or sent %q", what, ok, e.name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change event in 10 s", what)
		}
	}
	quiet := func() { // takes the events until none comes for a while
		for {
			select {
			case <-events:
			case <-time.After(2 * coalesceWindow):
				return
			}
		}
	}
	next("the stream opened")
	quiet()
	if src.noStreams.Load() || !src.streamed.Load() {
		t.Fatal("the source did not open a change stream")
	}
	if _, err := db.Collection("unrelated").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
		t.Fatal("a write to a collection that is no task collection sent a change event")
	case <-time.After(3 * coalesceWindow):
	}

	coll := db.Collection("emails")
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		t.Fatal(err)
	}
	next("a new task collection")
	quiet()
	p, err := mscheduler.NewProducer[string](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, mscheduler.Task[string]{Key: "k", Params: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	next("a task published in the new collection")
	quiet()
	if err := mscheduler.Heartbeat(ctx, db, mscheduler.WorkerInfo{ID: "w", Host: "box", PID: 1, Collections: []string{"emails"}, Capacity: 1, HeartbeatMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	next("a worker's heartbeat")
}
