package mschedulertest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

func TestParseDelay(t *testing.T) {
	for _, c := range []struct {
		in       string
		at       time.Duration
		min, max time.Duration
	}{
		{"1s", 0, time.Second, time.Second},
		{"300ms-800ms", 0, 300 * time.Millisecond, 800 * time.Millisecond},
		{"0s..2s/1m", 30 * time.Second, time.Second, time.Second},
		{"0s..2s/1m", 2 * time.Minute, 2 * time.Second, 2 * time.Second},
	} {
		d, err := mschedulertest.ParseDelay(c.in)
		if err != nil {
			t.Fatalf("ParseDelay(%q): %v", c.in, err)
		}
		for range 20 {
			if got := d("find", c.at); got < c.min || got > c.max {
				t.Fatalf("%s at %s: %s, want from %s to %s", c.in, c.at, got, c.min, c.max)
			}
		}
	}
	for _, bad := range []string{"", "fast", "-1s", "2s-1s", "0s..2s", "1s..x/1m"} {
		if _, err := mschedulertest.ParseDelay(bad); err == nil {
			t.Errorf("ParseDelay(%q) accepted", bad)
		}
	}
}

// TestDelayProxyHoldsEachCommand: a command through the proxy takes at
// least the delay, and comes back whole.
func TestDelayProxyHoldsEachCommand(t *testing.T) {
	hosts := options.Client().ApplyURI(mschedulertest.URI()).Hosts
	if len(hosts) != 1 {
		t.Skipf("the server URI names %d hosts; the proxy stands in front of a single-host server", len(hosts))
	}
	const delay = 150 * time.Millisecond
	p, err := mschedulertest.StartDelayProxy(hosts[0], mschedulertest.FixedDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	ctx := context.Background()
	if err := client.Ping(ctx, nil); err != nil { // the connection's hand-shake is held too
		t.Fatal(err)
	}
	coll := mschedulertest.CollectionOf(t, client)
	began := time.Now()
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "v", Value: 7}}); err != nil {
		t.Fatal(err)
	}
	var got struct{ V int }
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "k"}}).Decode(&got); err != nil || got.V != 7 {
		t.Fatalf("read back %v, %v", got, err)
	}
	if took := time.Since(began); took < 2*delay {
		t.Fatalf("an insert and a find took %s through a proxy holding each command %s", took, delay)
	}
}
