package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
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
//   - a body is cut at MaxBodyBytes.

// Defaults of Config's bounds.
const (
	// MaxBodyBytesDefault bounds a request's body: an edit of params of
	// the largest size the library takes (8 MiB), as form text, fits.
	MaxBodyBytesDefault = 16 << 20
	// MaxEventStreamsDefault bounds the live-update streams open at once.
	MaxEventStreamsDefault = 32
)

// loopbackNames are the host names of this machine that no DNS answer
// can rebind.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// guard wraps the dashboard's handler with the checks above.
func (d *Dashboard) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !d.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("this dashboard does not answer to the host %q: list it in Config.AllowedHosts (the command's --allow-host)", hostOf(r.Host)), http.StatusMisdirectedRequest)
			return
		}
		if d.cfg.Token == "" && !fromLoopback(r.RemoteAddr) {
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

// hostAllowed says the dashboard answers to host (a Host header, with or
// without its port): a loopback name, an IP address, or a name of
// AllowedHosts. A token does not widen it: a rebound page cannot send the
// token, but it can still load the login page and the read-only pages of a
// dashboard that also answers on loopback without one. An IP address cannot
// be rebound, since rebinding needs a name whose DNS answers the attacker
// controls.
func (d *Dashboard) hostAllowed(host string) bool {
	name := strings.ToLower(hostOf(host))
	if slices.Contains(loopbackNames, name) || net.ParseIP(name) != nil {
		return true
	}
	return slices.ContainsFunc(d.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(a, name) })
}

// ListenName is the host name of a listen address such as
// "dash.internal:8080", for AllowedHosts: a server bound to a name answers
// to it. It is "" for an IP address or none (every interface), which the
// dashboard answers to already.
func ListenName(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil || slices.Contains(loopbackNames, strings.ToLower(host)) {
		return ""
	}
	return host
}

// hostOf is the name in a Host header, without its port or brackets.
func hostOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// validHostName says name is a host name or an IP address: no scheme,
// port, path or user.
func validHostName(name string) bool {
	return name != "" && (net.ParseIP(name) != nil || !strings.ContainsAny(name, "/:@ \t[]"))
}

func isLoopbackIP(name string) bool {
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// fromLoopback says a request's peer is this machine.
func fromLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	return isLoopbackIP(host)
}

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
