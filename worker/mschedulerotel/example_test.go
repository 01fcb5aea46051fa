package mschedulerotel_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/mschedulerotel"
)

// The publisher's span and the handler's run share one trace: the producer
// stores the trace context in the task's headers, and the middleware starts
// each attempt's span under it.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(tp)
	defer tp.Shutdown(context.Background())

	coll := mschedulertest.Client().Database(mschedulertest.Database).Collection("otel_example")
	defer coll.Drop(context.Background())

	// The service that publishes: its request's span goes into the task.
	producer, _ := mscheduler.NewProducer[string](coll, &mscheduler.ProducerConfig{
		ContextHeaders: mschedulerotel.HeadersFromContext,
	})
	ctx, request := otel.Tracer("signup").Start(context.Background(), "POST /signup")
	producer.Publish(ctx, mscheduler.Task[string]{Key: "welcome-ada", Params: "ada@example.com"}, nil)
	request.End()

	// The worker: each attempt's span continues the request's trace.
	tracing, _ := mschedulerotel.Middleware(nil) // the global providers
	done := make(chan struct{})
	consumer, _ := mscheduler.NewConsumer(coll, func(ctx context.Context, t *mscheduler.Task[string]) (string, error) {
		return "sent to " + t.Params, nil
	}, &mscheduler.ConsumerConfig{
		Middleware: []mscheduler.Middleware{tracing},
		OnEvent: func(e mscheduler.Event) {
			if e.Kind == mscheduler.EventSucceeded {
				close(done)
			}
		},
	})
	consumer.Start(context.Background())
	<-done
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	consumer.Stop(stop)

	for _, s := range spans.Ended() {
		if s.Name() == mschedulerotel.SpanName {
			fmt.Println(s.Name(), "in the request's trace:", s.SpanContext().TraceID() == request.SpanContext().TraceID())
			for _, kv := range s.Attributes() {
				if kv.Key == mschedulerotel.KeyKey || kv.Key == mschedulerotel.OutcomeKey {
					fmt.Println(" ", kv.Key, "=", kv.Value.Emit())
				}
			}
		}
	}
	// Output:
	// mscheduler.run in the request's trace: true
	//   mscheduler.task.key = welcome-ada
	//   mscheduler.outcome = succeeded
}
