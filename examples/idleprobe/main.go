package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/devserver"
)

func main() {
	n := flag.Int("n", 50, "")
	poll := flag.Bool("poll", false, "")
	settle := flag.Duration("settle", 10*time.Second, "")
	window := flag.Duration("window", 30*time.Second, "")
	flag.Parse()
	var mu sync.Mutex
	counting := false
	counts := map[string]int{}
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		if counting {
			name := e.CommandName
			coll, _ := e.Command.Lookup(name).StringValueOK()
			suffix := "task"
			if strings.HasSuffix(coll, ".meta") {
				suffix = "meta"
			} else if strings.HasSuffix(coll, ".runs") {
				suffix = "runs"
			}
			var keys []string
			if f, ok := e.Command.Lookup("filter").DocumentOK(); ok {
				els, _ := f.Elements()
				for _, el := range els {
					keys = append(keys, el.Key())
				}
			}
			if q, ok := e.Command.Lookup("query").DocumentOK(); ok {
				els, _ := q.Elements()
				for _, el := range els {
					keys = append(keys, el.Key())
				}
			}
			if len(keys) > 3 {
				keys = keys[:3]
			}
			counts[name+"/"+suffix+"/"+strings.Join(keys, ",")]++
		}
		mu.Unlock()
	}}
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		srv, err := devserver.Start(context.Background(), devserver.Options{})
		if err != nil {
			panic(err)
		}
		defer srv.Stop()
		uri = srv.URI()
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetMonitor(mon))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	db := client.Database("idleprobe")
	_ = db.Drop(ctx)
	var cs []*mscheduler.Consumer[int, int]
	for i := range *n {
		cfg := &mscheduler.ConsumerConfig{WorkerID: "w", Capacity: 4}
		if *poll {
			cfg.Discovery = mscheduler.DiscoveryPoll
		} else {
			cfg.Discovery = mscheduler.DiscoveryChangeStream
		}
		c, err := mscheduler.NewConsumer(db.Collection(fmt.Sprintf("c%03d", i)), func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
		if err != nil {
			panic(err)
		}
		if err := c.Start(ctx); err != nil {
			panic(err)
		}
		cs = append(cs, c)
	}
	time.Sleep(*settle)
	mu.Lock()
	counting = true
	mu.Unlock()
	time.Sleep(*window)
	mu.Lock()
	counting = false
	var names []string
	total := 0
	for k, v := range counts {
		names = append(names, k)
		total += v
	}
	sort.Strings(names)
	fmt.Printf("n=%d poll=%v total %.2f/s:", *n, *poll, float64(total)/window.Seconds())
	for _, k := range names {
		fmt.Printf("\n  %s %.2f", k, float64(counts[k])/window.Seconds())
	}
	fmt.Println()
	mu.Unlock()
	for _, c := range cs {
		_ = c.Stop(ctx)
	}
	_ = db.Drop(ctx)
}
