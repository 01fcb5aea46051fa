package devserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

// These tests exercise the development server itself, so they start their own even when
// MONGODB_URI names a real server. Each uses a database of its own (mschedulertest.Name): with
// PostgreSQL storage (MSCHEDULER_DEV_POSTGRESQL_URL) the data outlives the server, and the
// servers of parallel tests share one PostgreSQL, where FerretDB 1.24 fails to create one
// database from two servers at once.

// startTimeout covers the first build of the server (FerretDB modules are downloaded then).
const startTimeout = 15 * time.Minute

// startServer starts a server that is stopped when the test ends.
func startServer(t *testing.T, opts devserver.Options) *devserver.Server {
	t.Helper()

	if opts.Stderr == nil {
		opts.Stderr = t.Output()
	}

	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()

	s, err := devserver.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})

	return s
}

// connect returns a client with its own connection pool, disconnected when the test ends.
func connect(t *testing.T, uri string, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()

	all := append([]*options.ClientOptions{
		options.Client().ApplyURI(uri).SetServerSelectionTimeout(10 * time.Second),
	}, opts...)

	client, err := mongo.Connect(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })

	if err := client.Ping(t.Context(), nil); err != nil {
		t.Fatal(err)
	}

	return client
}

func TestStartStop(t *testing.T) {
	t.Parallel()

	s := startServer(t, devserver.Options{})

	if want := "mongodb://" + s.Addr() + "/"; s.URI() != want {
		t.Errorf("URI() = %q, want %q", s.URI(), want)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want 127.0.0.1 and a real port", s.Addr())
	}

	coll := connect(t, s.URI()).Database(mschedulertest.Name(t)).Collection("start_stop")

	ctx := t.Context()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "name", Value: "a"}, {Key: "n", Value: 42}}); err != nil {
		t.Fatal(err)
	}

	var got struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "name", Value: "a"}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.N != 42 {
		t.Errorf("found n = %d, want 42", got.N)
	}

	dir := s.Dir()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Stop", s.Addr())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary data directory %s not removed by Stop: %v", dir, err)
	}
}

// TestClaimsAreAtomic is the property the library depends on: concurrent findOneAndUpdate
// calls never claim the same document (bare FerretDB 1.24 fails this badly).
func TestClaimsAreAtomic(t *testing.T) {
	t.Parallel()

	const (
		docs    = 300
		workers = 16
	)

	s := startServer(t, devserver.Options{})
	ctx := t.Context()

	db := mschedulertest.Name(t)
	coll := connect(t, s.URI()).Database(db).Collection("claims")
	ready := make([]any, docs)
	for i := range ready {
		ready[i] = bson.D{{Key: "n", Value: i}, {Key: "state", Value: "ready"}}
	}
	if _, err := coll.InsertMany(ctx, ready); err != nil {
		t.Fatal(err)
	}

	// One client per worker, so the claims travel on separate connections.
	colls := make([]*mongo.Collection, workers)
	for w := range colls {
		colls[w] = connect(t, s.URI()).Database(db).Collection("claims")
	}

	claims := make([][]int, workers)
	start := time.Now()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { claims[w] = claimAll(ctx, t, colls[w], w) })
	}
	wg.Wait()

	t.Logf("%d workers claimed %d documents in %v", workers, docs, time.Since(start).Round(time.Millisecond))

	checkClaims(t, claims, docs)
	checkOwners(t, coll, claims)
}

// claimAll claims ready documents until none is left and returns their n.
func claimAll(ctx context.Context, t *testing.T, coll *mongo.Collection, owner int) []int {
	filter := bson.D{{Key: "state", Value: "ready"}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "running"}, {Key: "owner", Value: owner}}}}

	var claimed []int
	for {
		var doc struct {
			N int `bson:"n"`
		}
		err := coll.FindOneAndUpdate(ctx, filter, update).Decode(&doc)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return claimed
		}
		if err != nil {
			t.Errorf("worker %d: %v", owner, err)
			return claimed
		}
		claimed = append(claimed, doc.N)
	}
}

// checkClaims asserts that every document was claimed exactly once.
func checkClaims(t *testing.T, claims [][]int, docs int) {
	t.Helper()

	count := make(map[int]int)
	busy := 0
	for _, c := range claims {
		if len(c) > 0 {
			busy++
		}
		for _, n := range c {
			count[n]++
		}
	}

	var duplicates, missing int
	for n := range docs {
		switch c := count[n]; {
		case c == 0:
			missing++
		case c > 1:
			duplicates += c - 1
		}
	}

	if duplicates != 0 || missing != 0 || len(count) != docs {
		t.Errorf("claims: %d duplicates, %d documents never claimed, %d distinct claimed; want 0, 0, %d",
			duplicates, missing, len(count), docs)
	}

	// With fewer than two workers the test would prove nothing about concurrency.
	if busy < 2 {
		t.Errorf("only %d worker(s) claimed anything", busy)
	}
}

// checkOwners asserts that the stored owner of each document is the worker that claimed it,
// which catches a lost update that the claim counts alone would not.
func checkOwners(t *testing.T, coll *mongo.Collection, claims [][]int) {
	t.Helper()

	cur, err := coll.Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}

	var stored []struct {
		N     int    `bson:"n"`
		State string `bson:"state"`
		Owner int    `bson:"owner"`
	}
	if err := cur.All(t.Context(), &stored); err != nil {
		t.Fatal(err)
	}

	owner := make(map[int]int)
	for w, c := range claims {
		for _, n := range c {
			owner[n] = w
		}
	}

	for _, d := range stored {
		if w, ok := owner[d.N]; d.State != "running" || !ok || d.Owner != w {
			t.Errorf("document n=%d: state %q owner %d; claimed by worker %d (%v)", d.N, d.State, d.Owner, w, ok)
		}
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	ctx := t.Context()

	first := startServer(t, devserver.Options{Dir: dir})
	if first.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", first.Dir(), dir)
	}

	db := mschedulertest.Name(t)
	coll := connect(t, first.URI()).Database(db).Collection("restart")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "kept"}, {Key: "n", Value: 7}}); err != nil {
		t.Fatal(err)
	}

	if err := first.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := first.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}

	second := startServer(t, devserver.Options{Dir: dir, Addr: first.Addr()})
	if second.Addr() != first.Addr() {
		t.Errorf("restarted on %s, want %s", second.Addr(), first.Addr())
	}

	coll = connect(t, second.URI()).Database(db).Collection("restart")

	var got struct {
		N int `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "kept"}}).Decode(&got); err != nil {
		t.Fatalf("document inserted before the kill: %v", err)
	}
	if got.N != 7 {
		t.Errorf("n = %d, want 7", got.N)
	}
}

// TestUnacknowledgedWrites covers OP_MSG requests with the moreToCome flag, which expect no
// reply: FerretDB answers them anyway and the front must drop that answer, or every later
// reply on the connection would be one behind.
func TestUnacknowledgedWrites(t *testing.T) {
	t.Parallel()

	s := startServer(t, devserver.Options{})
	ctx := t.Context()

	// One connection, so that the unacknowledged writes and the reads share it.
	client := connect(t, s.URI(), options.Client().SetMaxPoolSize(1))
	db := client.Database(mschedulertest.Name(t))
	unacked := db.Collection("unacked", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))

	const writes = 5
	for i := range writes {
		if _, err := unacked.InsertOne(ctx, bson.D{{Key: "n", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}

	// The front holds its lock until FerretDB has answered each write, so they are all
	// visible to the next command.
	n, err := db.Collection("unacked").CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if n != writes {
		t.Errorf("counted %d documents, want %d", n, writes)
	}

	if err := client.Ping(ctx, nil); err != nil {
		t.Errorf("ping after unacknowledged writes: %v", err)
	}
}

func TestStartFailsFast(t *testing.T) {
	t.Parallel()

	// A data directory that cannot be created makes the server exit during start-up.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()

	s, err := devserver.Start(ctx, devserver.Options{Dir: filepath.Join(file, "data")})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start succeeded with a data directory below a file")
	}
	if msg := err.Error(); !strings.Contains(msg, "exited before it was ready") || !strings.Contains(msg, "not a directory") {
		t.Errorf("error does not explain the failure: %v", err)
	}
}

// Example shows how a test uses the development server.
func Example() {
	ctx := context.Background()

	s, err := devserver.Start(ctx, devserver.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()

	client, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Disconnect(ctx)

	fmt.Println(client.Ping(ctx, nil))
}

// TestChangeStreamsSwitch: the server serves change streams unless Options.NoChangeStreams or
// MSCHEDULER_DEV_NO_CHANGE_STREAMS says not to; then $changeStream fails as on a standalone
// server. Not parallel: it sets the environment.
func TestChangeStreamsSwitch(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     string
		opts    devserver.Options
		streams bool
	}{
		{"default", "", devserver.Options{}, true},
		{"env 0", "0", devserver.Options{}, true},
		{"option", "", devserver.Options{NoChangeStreams: true}, false},
		{"env", "1", devserver.Options{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(devserver.EnvNoChangeStreams, c.env)
			s := startServer(t, c.opts)
			if s.ChangeStreams() != c.streams {
				t.Errorf("ChangeStreams() = %v, want %v", s.ChangeStreams(), c.streams)
			}
			coll := connect(t, s.URI()).Database(mschedulertest.Name(t)).Collection("streams")
			cs, err := coll.Watch(t.Context(), mongo.Pipeline{})
			if got := err == nil; got != c.streams {
				t.Fatalf("watch: %v; want a stream: %v", err, c.streams)
			}
			if err != nil {
				return
			}
			defer cs.Close(context.Background())
			if _, err := coll.InsertOne(t.Context(), bson.D{{Key: "n", Value: 1}}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if !cs.Next(ctx) {
				t.Fatalf("no event for an insert: %v", cs.Err())
			}
		})
	}
}
