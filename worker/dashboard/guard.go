package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/mscheduler/mscheduler/worker/internal/webguard"
)

// Every request passes the guard before any page or action sees it:
//   - its Host must be one the dashboard answers to, so that a page of
//     another site whose name was rebound to this address (DNS rebinding)
//     is refused: same-origin checks compare Origin with Host, and both
//     are the attacker's name then;
//   - without a token, it must come from this machine: a dashboard with no
//     token is read-only, and for the loopback interface alone;
//   - every reply refuses to be framed (clickjacking) and to be sniffed
//     as another type;
//
// The rules of the first three are worker/internal/webguard's, shared
// with the HTTP gateway;
//   - a body is cut at MaxBodyBytes.

// Defaults of Config's bounds.
const (
	// MaxBodyBytesDefault bounds a request's body: an edit of params of
	// the largest size the library takes (8 MiB), as form text, fits.
	MaxBodyBytesDefault = 16 << 20
	// MaxEventStreamsDefault bounds the live-update streams open at once.
	MaxEventStreamsDefault = 32
)

// guard wraps the dashboard's handler with the checks above.
func (d *Dashboard) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		webguard.SetHeaders(w.Header())
		if !webguard.HostAllowed(r.Host, d.cfg.AllowedHosts) {
			http.Error(w, fmt.Sprintf("this dashboard does not answer to the host %q: list it in Config.AllowedHosts (the command's --allow-host)", webguard.HostOf(r.Host)), http.StatusMisdirectedRequest)
			return
		}
		if d.cfg.Token == "" && !webguard.FromLoopback(r.RemoteAddr) {
			http.Error(w, "a dashboard without a token answers this machine only: set Config.Token (MSCHEDULER_DASHBOARD_TOKEN)", http.StatusForbidden)
			return
		}
		if r.ContentLength > d.cfg.MaxBodyBytes {
			http.Error(w, fmt.Sprintf("the body is larger than %d bytes (MaxBodyBytes)", d.cfg.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, d.cfg.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// ListenName is the host name of a listen address such as
// "dash.internal:8080", for AllowedHosts: a server bound to a name answers
// to it. It is "" for an IP address or none (every interface), which the
// dashboard answers to already.
func ListenName(addr string) string { return webguard.ListenName(addr) }

// Timeouts of the HTTP server that NewServer returns.
const (
	serverReadHeaderTimeout = 10 * time.Second
	serverReadTimeout       = 30 * time.Second
	// serverWriteTimeout bounds a page's reply; the live-update stream
	// moves its own deadline at each write.
	serverWriteTimeout = 30 * time.Second
	serverIdleTimeout  = 2 * time.Minute
	serverMaxHeader    = 64 << 10
)

// NewServer returns an HTTP server for h (a Dashboard, or a mux that
// mounts one) with every time bounded: reading a request's header and
// body, writing a reply, and a kept-alive connection left idle. A
// connection that sends a header slowly, or declares a body and sends
// nothing, is closed.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serverReadHeaderTimeout,
		ReadTimeout:       serverReadTimeout,
		WriteTimeout:      serverWriteTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    serverMaxHeader,
	}
}
