package webguard

import (
	"net/http"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	allowed := []string{"dash.internal"}
	cases := map[string]bool{
		"localhost": true, "LOCALHOST:8080": true, "127.0.0.1:80": true, "[::1]:8080": true, "::1": true,
		"10.1.2.3": true, "[2001:db8::1]:443": true,
		"dash.internal": true, "DASH.internal:8080": true,
		"evil.example": false, "evil.example:8080": false, "dash.internal.evil.example": false,
		"localhost.evil.example": false, "": false,
	}
	for host, want := range cases {
		if got := HostAllowed(host, allowed); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if HostAllowed("dash.internal", nil) {
		t.Error("a name answered without being allowed")
	}
}

func TestListenName(t *testing.T) {
	cases := map[string]string{
		"dash.internal:8080": "dash.internal", "127.0.0.1:8080": "", "[::1]:80": "", ":8080": "",
		"localhost:8080": "", "0.0.0.0:80": "", "no-port": "",
	}
	for addr, want := range cases {
		if got := ListenName(addr); got != want {
			t.Errorf("ListenName(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestValidHostName(t *testing.T) {
	for _, name := range []string{"dash.internal", "localhost", "10.0.0.1", "::1"} {
		if !ValidHostName(name) {
			t.Errorf("%q refused", name)
		}
	}
	for _, name := range []string{"", "http://dash", "dash:8080", "dash/x", "u@dash", "[::1]", "a b"} {
		if ValidHostName(name) {
			t.Errorf("%q taken as a host name", name)
		}
	}
}

func TestFromLoopback(t *testing.T) {
	cases := map[string]bool{"127.0.0.1:5000": true, "[::1]:5000": true, "127.0.0.1": true, "10.0.0.1:5000": false, "": false, "localhost:5000": false}
	for peer, want := range cases {
		if got := FromLoopback(peer); got != want {
			t.Errorf("FromLoopback(%q) = %v, want %v", peer, got, want)
		}
	}
}

func TestSetHeadersRefuseFraming(t *testing.T) {
	h := http.Header{}
	SetHeaders(h)
	if h.Get("X-Frame-Options") != "DENY" || h.Get("Content-Security-Policy") != "frame-ancestors 'none'" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", h)
	}
}

func TestTokenEqual(t *testing.T) {
	if !TokenEqual("0123456789abcdef", "0123456789abcdef") || TokenEqual("0123456789abcdef", "0123456789abcdeF") || TokenEqual("", "x") ||
		TokenEqual("0123456789abcdef0", "0123456789abcdef") || TokenEqual("0123456789abcde", "0123456789abcdef") {
		t.Error("tokens compared wrong")
	}
}
