package localwake

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// client is a client that never connects: the registry does no I/O.
func client(t *testing.T) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWakeReachesTheConsumersOfItsCollectionOnly(t *testing.T) {
	c1, c2 := client(t), client(t)
	tasks := c1.Database("db").Collection("tasks")
	mine, sameColl, otherColl, otherClient := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	defer AddConsumer(tasks, &Consumer{Wake: mine})()
	defer AddConsumer(c1.Database("db").Collection("tasks"), &Consumer{Wake: sameColl})()
	defer AddConsumer(c1.Database("db").Collection("other"), &Consumer{Wake: otherColl})()
	defer AddConsumer(c2.Database("db").Collection("tasks"), &Consumer{Wake: otherClient})()

	Wake(tasks)
	Wake(tasks) // the channels are full: it must not block
	if len(mine) != 1 || len(sameColl) != 1 {
		t.Fatalf("consumers of the collection woken %d and %d times, want 1 each", len(mine), len(sameColl))
	}
	if len(otherColl) != 0 || len(otherClient) != 0 {
		t.Fatalf("another collection's consumer woken %d times, another client's %d, want 0", len(otherColl), len(otherClient))
	}
}

func TestRemovedConsumerIsNotReached(t *testing.T) {
	tasks := client(t).Database("db").Collection("tasks")
	wake := make(chan struct{}, 1)
	var cancelled []string
	remove := AddConsumer(tasks, &Consumer{Wake: wake, Cancel: func(key string) { cancelled = append(cancelled, key) }})
	Cancel(tasks, "a")
	remove()
	Wake(tasks)
	Cancel(tasks, "b")
	if len(wake) != 0 || !slices.Equal(cancelled, []string{"a"}) {
		t.Fatalf("after remove: %d wakes and cancels %v, want none and [a]", len(wake), cancelled)
	}
}

func TestEndedDropsWhatAFullWaiterCannotTake(t *testing.T) {
	tasks := client(t).Database("db").Collection("tasks")
	ended := make(chan string, 1)
	remove := AddWaiter(tasks, &Waiter{Ended: ended})
	Ended(tasks, "a")
	Ended(tasks, "b") // full: dropped, not blocked on
	remove()
	Ended(tasks, "c")
	if got := <-ended; got != "a" || len(ended) != 0 {
		t.Fatalf("waiter heard %q and %d more, want a alone", got, len(ended))
	}
}
