package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Bounds of the HTTP server that NewServer returns.
const (
	serverReadHeaderTimeout = 10 * time.Second
	// serverReadTimeout bounds reading a request, header and body: room
	// for a body of MaxBodyBytesDefault on a slow link.
	serverReadTimeout = time.Minute
	// serverWriteMargin is the time a reply may take beyond the longest
	// wait of its route: the database's answers, a take's last runs.
	serverWriteMargin = 30 * time.Second
	serverIdleTimeout = 2 * time.Minute
	serverMaxHeader   = 64 << 10
)

// NewServer returns an HTTP server for g with every time bounded: reading
// a request's header and body, writing a reply, and a kept-alive
// connection left idle; a header is at most 64 KiB.
//
// Its WriteTimeout follows g's configuration, so that no reply is cut
// short: it runs from the end of the request's header, so it covers the
// body's reading (ReadTimeout at most), then the longest wait of a route
// (a take's Config.MaxWait, an end's Config.EndWait), then a margin. With
// the defaults it is 2m30s.
//
// Its Shutdown ends the takes waiting for runs at once, each answering
// with the runs it has (most often none), rather than holding the
// shutdown for up to MaxWait; other requests finish as Shutdown lets
// them. Call g.Stop afterwards to release the runs the gateway holds.
func NewServer(g *Gateway) *http.Server {
	stopping, stop := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           endTakesOn(stopping, g),
		ReadHeaderTimeout: serverReadHeaderTimeout,
		ReadTimeout:       serverReadTimeout,
		WriteTimeout:      serverReadTimeout + max(g.cfg.MaxWait, g.cfg.EndWait) + serverWriteMargin,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    serverMaxHeader,
	}
	srv.RegisterOnShutdown(stop)
	return srv
}

// errShutdown ends the waits of takes when the server shuts down: their
// clients are still there for the answer.
var errShutdown = errors.New("the gateway's server is shutting down")

// endTakesOn serves h, ending the wait of a take when stopping is done.
func endTakesOn(stopping context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isTake(r) {
			ctx, cancel := context.WithCancelCause(r.Context())
			defer cancel(nil)
			defer context.AfterFunc(stopping, func() { cancel(errShutdown) })()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// isTake says r is a take, the one route that waits for work: POST
// /v1/collections/{collection}/take.
func isTake(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/collections/")
	if !ok || r.Method != http.MethodPost {
		return false
	}
	_, route, _ := strings.Cut(rest, "/")
	return route == "take"
}
