package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker"
)

// The dashboard's demo: tasks of two collections that keep a demo worker
// busy, some failing, one slow enough to watch its lease, and a few plans.

type demoEmail struct {
	To string `bson:"to"`
}

type demoReport struct {
	Name string `bson:"name"`
}

// demoNewEvery is how often the demo publishes another email.
const demoNewEvery = 3 * time.Second

// runDemo publishes the demo tasks and runs the demo worker until ctx is
// done.
func runDemo(ctx context.Context, uri, db string) error {
	w, err := worker.New(ctx, worker.Config{URI: uri, Database: db, WorkerID: "demo-worker",
		HeartbeatInterval: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	err = errors.Join(
		worker.Register(w, "emails", sendDemoEmail, &mscheduler.ConsumerConfig{Capacity: 3}),
		worker.Register(w, "reports", buildDemoReport, &mscheduler.ConsumerConfig{Capacity: 2}),
	)
	if err != nil {
		return err
	}
	emails, err := mscheduler.NewProducer[demoEmail](w.Database().Collection("emails"), nil)
	if err != nil {
		return err
	}
	reports, err := mscheduler.NewProducer[demoReport](w.Database().Collection("reports"), nil)
	if err != nil {
		return err
	}
	run := make(chan error, 1)
	go func() { run <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-run:
		return err
	}
	if err := publishDemo(ctx, emails, reports); err != nil {
		return err
	}
	tick := time.NewTicker(demoNewEvery)
	defer tick.Stop()
	for n := 100; ; n++ {
		select {
		case err := <-run:
			return err
		case <-tick.C:
			to := fmt.Sprintf("user%d@example.com", n)
			if n%5 == 0 {
				to = "" // fails: no recipient
			}
			task := mscheduler.Task[demoEmail]{Key: fmt.Sprintf("welcome-%d", n), Params: demoEmail{To: to}, Tags: []string{"mail", "welcome"},
				Description: "welcome email", MaxRetries: 1, RetryDelay: 200 * time.Millisecond, MaxFailedRuns: 1}
			if _, err := emails.Publish(ctx, task, nil); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

func publishDemo(ctx context.Context, emails *mscheduler.Producer[demoEmail], reports *mscheduler.Producer[demoReport]) error {
	var tasks []mscheduler.Task[demoEmail]
	for i := range 12 {
		to := fmt.Sprintf("user%d@example.com", i)
		if i%4 == 3 {
			to = ""
		}
		tasks = append(tasks, mscheduler.Task[demoEmail]{Key: fmt.Sprintf("welcome-%d", i), Params: demoEmail{To: to},
			Tags: []string{"mail", "welcome"}, Description: "welcome email", MaxRetries: 1, RetryDelay: 200 * time.Millisecond, MaxFailedRuns: 1})
	}
	tasks = append(tasks, mscheduler.Task[demoEmail]{Key: "newsletter-later", Params: demoEmail{To: "list@example.com"},
		RunAt: time.Now().Add(20 * time.Minute), Tags: []string{"mail"}, Description: "newsletter, sent later"})
	if _, err := emails.PublishMany(ctx, tasks, nil); err != nil {
		return err
	}
	minutely := mscheduler.Every(1, mscheduler.Minute)
	weekly := mscheduler.Weekly(time.Monday, 9, 30)
	weekly.Zone = "Europe/Berlin"
	reportTasks := []mscheduler.Task[demoReport]{
		{Key: "sales-minutely", Params: demoReport{Name: "sales"}, Plan: &minutely, Description: "sales figures, every minute", PingInterval: 2 * time.Second, WorkerTimeout: 10 * time.Second},
		{Key: "weekly-summary", Params: demoReport{Name: "summary"}, Plan: &weekly, Description: "weekly summary"},
		{Key: "long-export", Params: demoReport{Name: "export"}, Description: "a long export: watch its lease", PingInterval: 2 * time.Second, WorkerTimeout: 10 * time.Second},
	}
	_, err := reports.PublishMany(ctx, reportTasks, nil)
	return err
}

func sendDemoEmail(ctx context.Context, t *mscheduler.Task[demoEmail]) (string, error) {
	if err := pause(ctx, time.Duration(300+rand.IntN(1500))*time.Millisecond); err != nil {
		return "", err
	}
	if t.Params.To == "" {
		return "", errors.New("no recipient")
	}
	return "sent to " + t.Params.To, nil
}

func buildDemoReport(ctx context.Context, t *mscheduler.Task[demoReport]) (string, error) {
	took := time.Duration(1+rand.IntN(3)) * time.Second
	if t.Params.Name == "export" {
		took = 2 * time.Minute
	}
	if err := pause(ctx, took); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s report built in %s", t.Params.Name, took), nil
}

// pause waits d, or until ctx is done (a cancel, a lost lease, a stop).
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}
