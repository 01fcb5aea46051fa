package main

import (
	"net/url"
	"testing"
)

func TestPoolDefaultsSizeThePostgreSQLPool(t *testing.T) {
	for _, c := range []struct{ in, conns, idle string }{
		{"postgres://u@h:5432/db", "250", "10s"},
		{"postgres://u@h:5432/db?sslmode=disable", "250", "10s"},
		{"postgres://u@h:5432/db?pool_max_conns=80&pool_max_conn_idle_time=1m", "80", "1m"},
	} {
		out, err := withPoolDefaults(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("%s gave %s: %v", c.in, out, err)
		}
		q := u.Query()
		if q.Get("pool_max_conns") != c.conns || q.Get("pool_max_conn_idle_time") != c.idle {
			t.Errorf("%s gave %s, want pool_max_conns=%s and pool_max_conn_idle_time=%s", c.in, out, c.conns, c.idle)
		}
		if u.Host != "h:5432" || u.Path != "/db" || u.User.Username() != "u" {
			t.Errorf("%s gave %s: the server or database changed", c.in, out)
		}
	}
	if _, err := withPoolDefaults("postgres://u@h:bad port/db"); err == nil {
		t.Error("a URL that does not parse was accepted")
	}
}
