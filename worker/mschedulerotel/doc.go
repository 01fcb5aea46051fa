// Package mschedulerotel traces and measures mscheduler runs with
// OpenTelemetry.
//
// It has its own module, so that programs that do not use OpenTelemetry do
// not pull its packages in with the library.
//
// Two pieces join a publisher's trace to the runs of the task it published:
//
//   - [HeadersFromContext], as the producer's
//     [mscheduler.ProducerConfig].ContextHeaders, stores the publishing
//     context's W3C trace context (traceparent, tracestate) and baggage in
//     the task document's headers;
//   - [Middleware], in [mscheduler.ConsumerConfig].Middleware, starts one
//     span per handler attempt, a child of the publisher's span, with the
//     task's key, the run id, the worker, the attempt number, the outcome
//     and the error, and counts attempts and their durations by outcome.
//
// The handler's context carries the attempt's span, so that the handler's
// own spans and outgoing calls join the same trace.
package mschedulerotel
