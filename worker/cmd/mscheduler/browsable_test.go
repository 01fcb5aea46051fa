package main

import (
	"net"
	"testing"
)

// TestBrowsableAddress: an address a browser on this machine can open is
// printed for a listener on every interface, not http://[::]:8082/.
func TestBrowsableAddress(t *testing.T) {
	for _, c := range []struct {
		addr *net.TCPAddr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8082}, "127.0.0.1:8082"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8082}, "127.0.0.1:8082"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 8080}, "10.0.0.7:8080"},
	} {
		if got := browsable(c.addr); got != c.want {
			t.Errorf("browsable(%s) = %s, want %s", c.addr, got, c.want)
		}
	}
	if isLoopback(&net.TCPAddr{IP: net.IPv4zero}) || !isLoopback(&net.TCPAddr{IP: net.IPv6loopback}) {
		t.Error("isLoopback: 0.0.0.0 is not loopback, ::1 is")
	}
}
