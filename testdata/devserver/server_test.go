package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// backendHost is the address of one FerretDB shared by the package's tests; each test puts a
// front of its own before it, and works in a database of its own.
var backendHost string

func TestMain(m *testing.M) {
	os.Exit(runWithBackend(m))
}

func runWithBackend(m *testing.M) int {
	dir, err := os.MkdirTemp("", "devserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	db, err := newFerretDB(config{dir: dir, handler: "sqlite"}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	u, err := url.Parse(db.MongoDBURI())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	backendHost = u.Host

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = db.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	return m.Run()
}

// testServer is a front before the shared FerretDB, and a client of it.
type testServer struct {
	front  *front
	uri    string
	client *mongo.Client
	db     *mongo.Database // a database of the test's own
}

// startServer starts a front with change streams configured by cfg (nil: none), stopped at the
// end of the test; setup, if any, configures the front before it serves.
func startServer(t *testing.T, cfg *streamConfig, setup ...func(*front)) *testServer {
	t.Helper()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(backendHost, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), cfg)
	for _, set := range setup {
		set(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.serve(ctx, ln) }()

	s := &testServer{front: f, uri: "mongodb://" + ln.Addr().String() + "/"}
	s.client = s.connect(t)
	s.db = s.client.Database(dbName(t))

	t.Cleanup(func() {
		_ = s.db.Drop(context.Background())
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("front did not stop within 10s")
		}
	})
	return s
}

// connect returns a new client of the server, disconnected at the end of the test (before the
// server stops).
func (s *testServer) connect(t *testing.T) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(s.uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// dbName is a database name for the test: FerretDB's SQLite keeps one file per database.
func dbName(t *testing.T) string {
	name := []byte(t.Name())
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			name[i] = '_'
		}
	}
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return fmt.Sprintf("t_%s_%d", name, time.Now().UnixNano()%1_000_000)
}

// testStreams is the stream configuration of most tests.
func testStreams() *streamConfig {
	cfg := defaultStreamConfig()
	return &cfg
}
