package mschedulerotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// ScopeName names the tracer and meter of this package.
const ScopeName = "github.com/mscheduler/mscheduler/worker/mschedulerotel"

// SpanName is the name of every attempt's span.
const SpanName = "mscheduler.run"

// Attribute keys of the attempt spans; the metrics carry only OutcomeKey,
// since keys and run ids would give them one series per task.
const (
	KeyKey      = attribute.Key("mscheduler.task.key")
	RunIDKey    = attribute.Key("mscheduler.run.id")
	WorkerIDKey = attribute.Key("mscheduler.worker.id")
	AttemptKey  = attribute.Key("mscheduler.run.attempt")
	OutcomeKey  = attribute.Key("mscheduler.outcome")
)

// Outcomes of an attempt, as OutcomeKey records them.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeTimeout   = "timeout"    // ran past the task's Timeout
	OutcomeLeaseLost = "lease_lost" // another worker may run it now
	OutcomeShutdown  = "shutdown"   // the consumer stopped past its deadline
	OutcomeCancelled = "cancelled"  // the task was cancelled or stopped allowing the worker
	OutcomePanic     = "panic"
)

// Config says where the middleware sends spans and metrics. The zero value
// is ready to use.
type Config struct {
	// TracerProvider defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator reads the publisher's context from the task's headers.
	// Defaults to [W3C], which [HeadersFromContext] writes.
	Propagator propagation.TextMapPropagator
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.TracerProvider == nil {
		out.TracerProvider = otel.GetTracerProvider()
	}
	if out.MeterProvider == nil {
		out.MeterProvider = otel.GetMeterProvider()
	}
	if out.Propagator == nil {
		out.Propagator = W3C
	}
	return &out
}

// instruments are what one middleware records with.
type instruments struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	attempts   metric.Int64Counter
	duration   metric.Float64Histogram
}

// Middleware returns a middleware that records a span per handler attempt
// and counts attempts ("mscheduler.attempts") and their durations
// ("mscheduler.attempt.duration", in seconds) by outcome. Its error comes
// from the meter, when it refuses an instrument.
func Middleware(cfg *Config) (mscheduler.Middleware, error) {
	cfg = cfg.withDefaults()
	meter := cfg.MeterProvider.Meter(ScopeName)
	attempts, err := meter.Int64Counter("mscheduler.attempts",
		metric.WithDescription("Handler attempts, by outcome."), metric.WithUnit("{attempt}"))
	if err != nil {
		return nil, err
	}
	duration, err := meter.Float64Histogram("mscheduler.attempt.duration",
		metric.WithDescription("How long handler attempts took, by outcome."), metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	in := &instruments{
		tracer:     cfg.TracerProvider.Tracer(ScopeName),
		propagator: cfg.Propagator,
		attempts:   attempts,
		duration:   duration,
	}
	return in.wrap, nil
}

func (in *instruments) wrap(next mscheduler.RunFunc) mscheduler.RunFunc {
	return func(ctx context.Context, a *mscheduler.Attempt) (err error) {
		parent := in.propagator.Extract(ctx, propagation.MapCarrier(a.Headers))
		ctx, span := in.tracer.Start(parent, SpanName, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(runAttributes(a)...))
		start := time.Now()
		panicked := true
		defer func() {
			outcome := outcomeOf(ctx, err, panicked)
			in.record(ctx, span, outcome, err, time.Since(start))
			if panicked {
				span.End()
				panic(recover()) // the consumer turns it into the attempt's error
			}
			span.End()
		}()
		err = next(ctx, a)
		panicked = false
		return err
	}
}

// runAttributes are the span attributes known before the attempt runs.
func runAttributes(a *mscheduler.Attempt) []attribute.KeyValue {
	attrs := []attribute.KeyValue{KeyKey.String(a.Key)}
	if r := a.Run; r != nil {
		attrs = append(attrs, RunIDKey.String(r.ID), WorkerIDKey.String(r.WorkerID), AttemptKey.Int(r.Attempt))
	}
	return attrs
}

// outcomeOf classifies an attempt the way the consumer will: a cancelled
// context decides over what the handler returned.
func outcomeOf(ctx context.Context, err error, panicked bool) string {
	switch cause := context.Cause(ctx); {
	case panicked:
		return OutcomePanic
	case ctx.Err() == nil && err == nil:
		return OutcomeSucceeded
	case ctx.Err() == nil:
		return OutcomeFailed
	case errors.Is(cause, mscheduler.ErrTimeout):
		return OutcomeTimeout
	case errors.Is(cause, mscheduler.ErrLeaseLost):
		return OutcomeLeaseLost
	case errors.Is(cause, mscheduler.ErrShutdown):
		return OutcomeShutdown
	default:
		return OutcomeCancelled
	}
}

func (in *instruments) record(ctx context.Context, span trace.Span, outcome string, err error, took time.Duration) {
	span.SetAttributes(OutcomeKey.String(outcome))
	if outcome != OutcomeSucceeded {
		if err == nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetStatus(codes.Error, outcome)
		}
	}
	set := metric.WithAttributes(OutcomeKey.String(outcome))
	in.attempts.Add(context.WithoutCancel(ctx), 1, set)
	in.duration.Record(context.WithoutCancel(ctx), took.Seconds(), set)
}
