// Package mschedulertest helps test code that uses mscheduler against a real
// server: the one named by MONGODB_URI, or else the development server
// (worker/devserver, from a checkout of the repository), started once per
// test binary. Each test gets a collection of its own, and [Events] lets a
// test wait for consumer events instead of sleeping.
package mschedulertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/mscheduler/mscheduler/worker/devserver"
)

// EnvURI names the environment variable that points tests, examples and
// workers at a MongoDB server.
const EnvURI = "MONGODB_URI"

// Database is the database tests create their collections in.
const Database = "mscheduler_test"

var (
	uri    string
	server *devserver.Server
	client *mongo.Client
)

// Main runs the tests of a package against the server: call it from
// TestMain as os.Exit(mschedulertest.Main(m)). After a passing run it fails
// the binary if goroutines were left behind.
func Main(m *testing.M) int {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "mschedulertest:", err)
		return 1
	}
	code := m.Run()
	_ = client.Disconnect(context.Background())
	if server != nil {
		_ = server.Stop()
	}
	if code == 0 {
		// Every consumer, client and handler a test started must be gone.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "mschedulertest: goroutines left behind:", err)
			return 1
		}
	}
	return code
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a first build of the server takes minutes
	defer cancel()
	uri = os.Getenv(EnvURI)
	if uri == "" {
		var err error
		server, err = devserver.Start(ctx, devserver.Options{})
		if err != nil {
			return fmt.Errorf("start the development server (or set %s): %w", EnvURI, err)
		}
		uri = server.URI()
	}
	var err error
	client, err = mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	return client.Ping(ctx, nil)
}

// URI is the server's connection string.
func URI() string { return uri }

// Server is the development server, or nil when MONGODB_URI is set.
func Server() *devserver.Server { return server }

// Client is the shared client.
func Client() *mongo.Client { return client }

// NewClient returns a client with its own connection pool, closed at the
// end of the test: one per simulated worker process.
func NewClient(t testing.TB, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()
	o := append([]*options.ClientOptions{options.Client().ApplyURI(uri)}, opts...)
	c, err := mongo.Connect(o...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// Collection returns a new, empty collection for this test, dropped at its
// end.
func Collection(t testing.TB) *mongo.Collection {
	t.Helper()
	return CollectionOf(t, client)
}

// CollectionOf is Collection through another client.
func CollectionOf(t testing.TB, c *mongo.Client) *mongo.Collection {
	t.Helper()
	name := Name(t)
	coll := c.Database(Database).Collection(name)
	t.Cleanup(func() {
		_ = coll.Drop(context.Background())
		_ = c.Database(Database).Collection(name + ".meta").Drop(context.Background()) // its metadata
		_ = c.Database(Database).Collection(name + ".runs").Drop(context.Background()) // its run history
	})
	return coll
}

var (
	namesMu sync.Mutex
	names   = map[string]string{}
)

// Name is the collection name of the test: its name, made safe, with a
// random suffix so that reruns never see old data. It is stable within
// one test.
func Name(t testing.TB) string {
	namesMu.Lock()
	defer namesMu.Unlock()
	if n, ok := names[t.Name()]; ok {
		return n
	}
	base := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(base) > 60 {
		base = base[len(base)-60:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := base + "_" + hex.EncodeToString(b[:])
	names[t.Name()] = n
	return n
}

// HasChangeStreams reports whether the server delivers change streams.
func HasChangeStreams(ctx context.Context, coll *mongo.Collection) bool {
	cs, err := coll.Watch(ctx, mongo.Pipeline{})
	if err != nil {
		return false
	}
	_ = cs.Close(ctx)
	return true
}

// Doc reads one document by key as a map, for assertions.
func Doc(t testing.TB, coll *mongo.Collection, key string) bson.M {
	t.Helper()
	var m bson.M
	if err := coll.FindOne(context.Background(), bson.D{{Key: "key", Value: key}}).Decode(&m); err != nil {
		t.Fatalf("read task %q: %v", key, err)
	}
	return m
}

// ConnectOrExit connects a subprocess of a test to uri, or exits.
func ConnectOrExit(uri string) *mongo.Client {
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	return c
}
