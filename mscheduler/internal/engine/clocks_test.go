package engine

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestConsumersOfAClientShareItsClock: consumers of one client (any of
// its databases and collections) measure the server's time once between
// them; another client, another sync interval or a consumer with a clock
// of its own measure theirs.
func TestConsumersOfAClientShareItsClock(t *testing.T) {
	connect := func() *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1")) // never reached: no I/O here
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
		return c
	}
	one, other := connect(), connect()
	cfg := &Config{ClockSyncInterval: time.Minute}
	first := clockFor(one.Database("a").Collection("x"), cfg)
	if got := clockFor(one.Database("b").Collection("y"), cfg); got != first {
		t.Error("two consumers of one client have clocks of their own")
	}
	if got := clockFor(other.Database("a").Collection("x"), cfg); got == first {
		t.Error("consumers of two clients share a clock")
	}
	if got := clockFor(one.Database("a").Collection("x"), &Config{ClockSyncInterval: time.Second}); got == first {
		t.Error("consumers with different sync intervals share a clock")
	}
	own := &Config{ClockSyncInterval: time.Minute, Clock: time.Now}
	if got := clockFor(one.Database("a").Collection("x"), own); got == first || got == clockFor(one.Database("a").Collection("x"), own) {
		t.Error("a consumer with a wall clock of its own shares a clock")
	}
}
