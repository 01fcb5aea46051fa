package mschedulerotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/mschedulerotel"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// telemetry is an in-memory tracer and meter provider.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

// runSpans are the ended attempt spans, in the order they ended.
func (tel *telemetry) runSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == mschedulerotel.SpanName {
			out = append(out, s)
		}
	}
	return out
}

// attemptCounts sums mscheduler.attempts by outcome, and counts the
// duration histogram's observations.
func (tel *telemetry) attemptCounts(t *testing.T) (byOutcome map[string]int64, durations uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	byOutcome = map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == "mscheduler.attempts" {
					for _, p := range data.DataPoints {
						o, _ := p.Attributes.Value(mschedulerotel.OutcomeKey)
						byOutcome[o.AsString()] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "mscheduler.attempt.duration" {
					for _, p := range data.DataPoints {
						durations += p.Count
					}
				}
			}
		}
	}
	return byOutcome, durations
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func startConsumer[P, R any](t *testing.T, coll *mongo.Collection, h mscheduler.Handler[P, R], mw mscheduler.Middleware, ev *mschedulertest.Events) {
	t.Helper()
	c, err := mscheduler.NewConsumer(coll, h, &mscheduler.ConsumerConfig{
		WorkerID: "w", PollInterval: 50 * time.Millisecond, Logger: quiet, OnEvent: ev.Record,
		Middleware: []mscheduler.Middleware{mw},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

func newProducer(t *testing.T, coll *mongo.Collection) *mscheduler.Producer[string] {
	t.Helper()
	p, err := mscheduler.NewProducer[string](coll, &mscheduler.ProducerConfig{ContextHeaders: mschedulerotel.HeadersFromContext})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAttemptSpansJoinThePublishersTrace: each attempt's span is a child of
// the span that published the task, carries the run's identity, attempt
// number and outcome, records the error of a failed attempt, and is the
// parent of the handler's own spans; the metrics count both attempts.
func TestAttemptSpansJoinThePublishersTrace(t *testing.T) {
	tel := newTelemetry(t)
	coll := mschedulertest.Collection(t)
	ctx, publishSpan := tel.tp.Tracer("test").Start(context.Background(), "handle signup")
	if _, err := newProducer(t, coll).Publish(ctx, mscheduler.Task[string]{Key: "welcome-1", Params: "ada", MaxRetries: 1, RetryDelay: time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	publishSpan.End()

	mw, err := mschedulerotel.Middleware(&mschedulerotel.Config{TracerProvider: tel.tp, MeterProvider: tel.mp})
	if err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		_, span := tel.tp.Tracer("test").Start(ctx, "send mail")
		defer span.End()
		if task.Run.Attempt == 1 {
			return "", errors.New("smtp: 421 try again")
		}
		return "sent", nil
	}, mw, ev)
	ev.WaitCount(t, mscheduler.EventSucceeded, 1)

	runs := tel.runSpans()
	if len(runs) != 2 {
		t.Fatalf("%d run spans, want one per attempt (2)", len(runs))
	}
	for i, s := range runs {
		if s.SpanContext().TraceID() != publishSpan.SpanContext().TraceID() || s.Parent().SpanID() != publishSpan.SpanContext().SpanID() {
			t.Fatalf("attempt %d: span not a child of the publisher's (trace %s parent %s, want %s %s)", i+1,
				s.SpanContext().TraceID(), s.Parent().SpanID(), publishSpan.SpanContext().TraceID(), publishSpan.SpanContext().SpanID())
		}
		if attr(s, mschedulerotel.KeyKey).AsString() != "welcome-1" || attr(s, mschedulerotel.RunIDKey).AsString() == "" ||
			attr(s, mschedulerotel.WorkerIDKey).AsString() != "w" || attr(s, mschedulerotel.AttemptKey).AsInt64() != int64(i+1) {
			t.Fatalf("attempt %d: attributes %v", i+1, s.Attributes())
		}
	}
	failed, succeeded := runs[0], runs[1]
	if got := attr(failed, mschedulerotel.OutcomeKey).AsString(); got != mschedulerotel.OutcomeFailed || failed.Status().Code != codes.Error ||
		failed.Status().Description != "smtp: 421 try again" || len(failed.Events()) == 0 || failed.Events()[0].Name != "exception" {
		t.Fatalf("failed attempt: outcome %q, status %+v, events %v", got, failed.Status(), failed.Events())
	}
	if got := attr(succeeded, mschedulerotel.OutcomeKey).AsString(); got != mschedulerotel.OutcomeSucceeded || succeeded.Status().Code == codes.Error {
		t.Fatalf("second attempt: outcome %q, status %+v", got, succeeded.Status())
	}
	var handlerSpans int
	for _, s := range tel.spans.Ended() {
		if s.Name() == "send mail" {
			handlerSpans++
			if !slices.ContainsFunc(runs, func(r sdktrace.ReadOnlySpan) bool { return r.SpanContext().SpanID() == s.Parent().SpanID() }) {
				t.Fatalf("the handler's span has parent %s, not an attempt span", s.Parent().SpanID())
			}
		}
	}
	if handlerSpans != 2 {
		t.Fatalf("%d handler spans, want 2", handlerSpans)
	}
	counts, durations := tel.attemptCounts(t)
	if counts[mschedulerotel.OutcomeFailed] != 1 || counts[mschedulerotel.OutcomeSucceeded] != 1 || durations != 2 {
		t.Fatalf("attempts by outcome %v and %d durations, want 1 failed, 1 succeeded, 2 durations", counts, durations)
	}
}

// TestOutcomesOfAttemptsThatDidNotReturn: an attempt cut by the task's
// Timeout is a timeout, and a panic is recorded and still reaches the
// consumer, which fails the run.
func TestOutcomesOfAttemptsThatDidNotReturn(t *testing.T) {
	tel := newTelemetry(t)
	coll := mschedulertest.Collection(t)
	p := newProducer(t, coll)
	for _, task := range []mscheduler.Task[string]{
		{Key: "slow", Params: "wait", Timeout: 50 * time.Millisecond},
		{Key: "boom", Params: "panic"},
	} {
		task.MaxRetries, task.MaxFailedRuns = mscheduler.NoRetries, 1
		if _, err := p.Publish(context.Background(), task, nil); err != nil {
			t.Fatal(err)
		}
	}
	mw, err := mschedulerotel.Middleware(&mschedulerotel.Config{TracerProvider: tel.tp, MeterProvider: tel.mp})
	if err != nil {
		t.Fatal(err)
	}
	ev := mschedulertest.NewEvents()
	startConsumer(t, coll, func(ctx context.Context, task *mscheduler.Task[string]) (string, error) {
		if task.Params == "panic" {
			panic("nil map write")
		}
		<-ctx.Done()
		return "", ctx.Err()
	}, mw, ev)
	ev.WaitCount(t, mscheduler.EventFailed, 2)

	outcomes := map[string]string{}
	for _, s := range tel.runSpans() {
		outcomes[attr(s, mschedulerotel.KeyKey).AsString()] = attr(s, mschedulerotel.OutcomeKey).AsString()
		if s.Status().Code != codes.Error {
			t.Fatalf("span of %s has status %+v, want an error", attr(s, mschedulerotel.KeyKey).AsString(), s.Status())
		}
	}
	if outcomes["slow"] != mschedulerotel.OutcomeTimeout || outcomes["boom"] != mschedulerotel.OutcomePanic {
		t.Fatalf("outcomes %v, want slow: timeout, boom: panic", outcomes)
	}
	var panicked bool
	for _, e := range ev.Snapshot() {
		panicked = panicked || (e.Kind == mscheduler.EventFailed && e.Key == "boom" && e.Err != nil && strings.Contains(e.Err.Error(), "handler panic: nil map write"))
	}
	if !panicked {
		t.Fatalf("the consumer did not see the panic as the run's error: %+v", ev.Snapshot())
	}
}

// TestNoHeadersWithoutATrace: a context with no span and no baggage adds
// nothing to the task.
func TestNoHeadersWithoutATrace(t *testing.T) {
	if h := mschedulerotel.HeadersFromContext(context.Background()); h != nil {
		t.Fatalf("headers = %v, want none", h)
	}
}
