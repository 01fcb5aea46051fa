package gateway

import (
	"crypto/subtle"
	"net"
	"slices"
	"strings"
)

// hostAllowed answers a loopback name, an IP address (which DNS rebinding
// cannot use) or a name of AllowedHosts, as the dashboard does.
func (g *Gateway) hostAllowed(host string) bool {
	name := strings.ToLower(hostOf(host))
	if name == "localhost" || net.ParseIP(name) != nil {
		return true
	}
	return slices.ContainsFunc(g.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(a, name) })
}

func hostOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

func fromLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
