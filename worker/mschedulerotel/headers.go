package mschedulerotel

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// W3C is the propagator both sides use unless [Config].Propagator says
// otherwise: W3C trace context and W3C baggage. It is fixed rather than
// the global propagator, whose default injects nothing.
var W3C propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// HeadersFromContext returns ctx's trace context and baggage as task
// headers, in W3C format; nil when ctx carries neither. Set it as
// [mscheduler.ProducerConfig].ContextHeaders.
func HeadersFromContext(ctx context.Context) map[string]string {
	carrier := propagation.MapCarrier{}
	W3C.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}
