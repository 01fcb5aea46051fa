// Package webguard holds the checks that every web surface of the worker
// runtime (the dashboard, the HTTP gateway) makes before a handler sees a
// request, so that each rule has one owner: which Host names are answered
// (DNS rebinding), which peers count as this machine, the headers that
// refuse framing and sniffing, and how tokens are compared.
package webguard

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"slices"
	"strings"
)

// loopbackNames are the host names of this machine that no DNS answer
// can rebind.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// HostAllowed says a surface answers to host (a Host header, with or
// without its port): a loopback name, an IP address, or one of allowed.
// An IP address cannot be rebound, since rebinding needs a name whose DNS
// answers the attacker controls; a token does not widen the rule, for a
// rebound page can still load what needs none.
func HostAllowed(host string, allowed []string) bool {
	name := strings.ToLower(HostOf(host))
	if slices.Contains(loopbackNames, name) || net.ParseIP(name) != nil {
		return true
	}
	return slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, name) })
}

// HostOf is the name in a Host header, without its port or brackets.
func HostOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// ListenName is the host name of a listen address such as
// "dash.internal:8080", to be allowed: a server bound to a name answers
// to it. It is "" for an IP address, a loopback name or none (every
// interface), which are answered already.
func ListenName(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil || slices.Contains(loopbackNames, strings.ToLower(host)) {
		return ""
	}
	return host
}

// ValidHostName says name is a host name or an IP address: no scheme,
// port, path or user, as an allowed name must be.
func ValidHostName(name string) bool {
	return name != "" && (net.ParseIP(name) != nil || !strings.ContainsAny(name, "/:@ \t[]"))
}

// FromLoopback says a request's peer (its RemoteAddr) is this machine.
func FromLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SetHeaders sets on a reply the headers every surface sends: it may not
// be framed by another page (clickjacking), nor sniffed as another type,
// and links out of it carry no path.
func SetHeaders(h http.Header) {
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// TokenEqual compares a presented token with a configured one in time
// that depends neither on where they differ nor on their lengths: it
// compares their SHA-256 digests, of one length whatever the tokens'
// (a comparison of the tokens themselves ends at once when their lengths
// differ, and so tells the configured token's length).
func TokenEqual(presented, configured string) bool {
	p, c := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(configured))
	return subtle.ConstantTimeCompare(p[:], c[:]) == 1
}
