package mscheduler_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

type requestIDKey struct{}

// TestHeadersTravelFromPublisherToHandler: the publishing context's
// headers and the task's own (which win key by key) are stored with the
// task and reach both the middleware and the handler.
func TestHeadersTravelFromPublisherToHandler(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, &mscheduler.ProducerConfig{
		ContextHeaders: func(ctx context.Context) map[string]string {
			id, _ := ctx.Value(requestIDKey{}).(string)
			return map[string]string{"request-id": id, "tenant": "from-context"}
		},
	})
	ctx := context.WithValue(ctxT(t), requestIDKey{}, "req-7")
	if _, err := p.Publish(ctx, mscheduler.Task[int]{Key: "k", Headers: map[string]string{"tenant": "acme"}}, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"request-id": "req-7", "tenant": "acme"}
	stored := mschedulertest.Doc(t, coll, "k")["headers"]
	if got, ok := stored.(bson.D); !ok || len(got) != 2 {
		t.Fatalf("stored headers = %#v, want %v", stored, want)
	}

	var mu sync.Mutex
	var inMiddleware, inHandler map[string]string
	ev := mschedulertest.NewEvents()
	cfg := fastConfig("w", ev)
	cfg.Middleware = []mscheduler.Middleware{func(next mscheduler.RunFunc) mscheduler.RunFunc {
		return func(ctx context.Context, a *mscheduler.Attempt) error {
			mu.Lock()
			inMiddleware = maps.Clone(a.Headers)
			mu.Unlock()
			return next(ctx, a)
		}
	}}
	startConsumer(t, coll, func(_ context.Context, task *mscheduler.Task[int]) (int, error) {
		mu.Lock()
		inHandler = maps.Clone(task.Headers)
		mu.Unlock()
		return 0, nil
	}, cfg)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)
	mu.Lock()
	defer mu.Unlock()
	if !maps.Equal(inMiddleware, want) || !maps.Equal(inHandler, want) {
		t.Fatalf("middleware saw %v, handler saw %v, want %v", inMiddleware, inHandler, want)
	}
}

// TestBadHeadersAreRefusedByName: a header key MongoDB would read as a path
// or an operator, or headers over the size limit, are refused naming the
// field, and nothing is written.
func TestBadHeadersAreRefusedByName(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	cases := []struct {
		headers map[string]string
		field   string
	}{
		{map[string]string{"": "x"}, "Headers"},
		{map[string]string{"a.b": "x"}, `Headers["a.b"]`},
		{map[string]string{"$set": "x"}, `Headers["$set"]`},
		{map[string]string{"big": strings.Repeat("x", mscheduler.MaxHeadersBytes)}, "Headers"},
	}
	for _, c := range cases {
		_, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Headers: c.headers}, nil)
		wantInvalid(t, err, c.field)
	}
	ctxp := newProducer[int](t, coll, &mscheduler.ProducerConfig{
		ContextHeaders: func(context.Context) map[string]string { return map[string]string{"x.y": "1"} },
	})
	_, err := ctxp.PublishMany(ctxT(t), []mscheduler.Task[int]{{Key: "a"}}, nil)
	wantInvalid(t, err, `tasks[0].Headers["x.y"]`)
	if n := countDocs(t, coll, bson.D{}); n != 0 {
		t.Fatalf("%d documents written on bad headers, want 0", n)
	}
}

// TestResetReplacesHeaders: publishing a finished task again carries the
// new publisher's headers, none when it has none, never the old ones.
func TestResetReplacesHeaders(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	ctx := ctxT(t)
	if _, err := p.Publish(ctx, mscheduler.Task[int]{Key: "k", Headers: map[string]string{"old": "1"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Cancel(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	res, err := p.Publish(ctx, mscheduler.Task[int]{Key: "k"}, &mscheduler.PublishOpts{ResetFinished: true})
	if err != nil || res.Outcome != mscheduler.PublishUpdated {
		t.Fatalf("reset publish: %+v, %v", res, err)
	}
	info, err := p.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Task.Headers) != 0 {
		t.Fatalf("headers after a reset without any = %v, want none", info.Task.Headers)
	}
}
