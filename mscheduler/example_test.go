package mscheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

type greeting struct {
	Name string `bson:"name"`
}

// Publish a task and run it with a consumer.
func Example() {
	ctx := context.Background()
	coll := mschedulertest.Client().Database(mschedulertest.Database).Collection("example_greetings")
	defer coll.Drop(ctx)
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		panic(err)
	}

	producer, err := mscheduler.NewProducer[greeting](coll, nil)
	if err != nil {
		panic(err)
	}
	res, err := producer.Publish(ctx, mscheduler.Task[greeting]{Key: "greet-ada", Params: greeting{Name: "Ada"}}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("publish:", res.Outcome)
	res, _ = producer.Publish(ctx, mscheduler.Task[greeting]{Key: "greet-ada", Params: greeting{Name: "Bob"}}, nil)
	fmt.Println("publish again:", res.Outcome)

	done := make(chan struct{})
	consumer, err := mscheduler.NewConsumer(coll,
		func(ctx context.Context, task *mscheduler.Task[greeting]) (string, error) {
			return "hello, " + task.Params.Name, nil
		},
		&mscheduler.ConsumerConfig{
			WorkerID:     "example-worker",
			PollInterval: 50 * time.Millisecond,
			Logger:       quietLog,
			OnEvent: func(e mscheduler.Event) {
				if e.Kind == mscheduler.EventSucceeded {
					fmt.Println(e.Key, "succeeded on", e.WorkerID)
					close(done)
				}
			},
		})
	if err != nil {
		panic(err)
	}
	if err := consumer.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	_ = consumer.Stop(ctx)

	var task struct {
		Status string `bson:"status"`
		Runs   []struct {
			Result string `bson:"result"`
		} `bson:"runs"`
	}
	_ = coll.FindOne(ctx, map[string]string{"_id": "greet-ada"}).Decode(&task)
	fmt.Println(task.Status, task.Runs[0].Result)
	// Output:
	// publish: inserted
	// publish again: unchanged
	// greet-ada succeeded on example-worker
	// succeeded hello, Ada
}

type receipt struct {
	To    string `bson:"to"`
	Bytes int    `bson:"bytes"`
}

// Wait for a task, then read its handler's result as the handler's type.
func ExampleResultAs() {
	ctx := context.Background()
	coll := mschedulertest.Client().Database(mschedulertest.Database).Collection("example_receipts")
	defer coll.Drop(ctx)
	if err := mscheduler.EnsureIndexes(ctx, coll); err != nil {
		panic(err)
	}
	producer, err := mscheduler.NewProducer[greeting](coll, nil)
	if err != nil {
		panic(err)
	}
	consumer, err := mscheduler.NewConsumer(coll,
		func(ctx context.Context, task *mscheduler.Task[greeting]) (receipt, error) {
			return receipt{To: task.Params.Name, Bytes: 7 + len(task.Params.Name)}, nil
		},
		&mscheduler.ConsumerConfig{WorkerID: "example-worker", PollInterval: 50 * time.Millisecond, Logger: quietLog})
	if err != nil {
		panic(err)
	}
	if err := consumer.Start(ctx); err != nil {
		panic(err)
	}
	defer consumer.Stop(ctx)
	if _, err := producer.Publish(ctx, mscheduler.Task[greeting]{Key: "mail-ada", Params: greeting{Name: "Ada"}}, nil); err != nil {
		panic(err)
	}

	done, err := producer.Wait(ctx, "mail-ada")
	if err != nil {
		panic(err)
	}
	last, _ := done.LastRun()
	r, err := mscheduler.ResultAs[receipt](last)
	fmt.Println(done.Status, r.To, r.Bytes, err)
	// Output:
	// succeeded Ada 10 <nil>
}
