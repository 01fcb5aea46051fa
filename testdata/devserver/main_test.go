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

// TestGCPercentUnlessGOGCIsSet: the server collects garbage less often than Go's default, unless
// GOGC says how often.
func TestGCPercentUnlessGOGCIsSet(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if p, ok := gcPercent(getenv); !ok || p != gcPercentDefault {
		t.Errorf("GOGC unset: gcPercent = %d, %v; want %d, true", p, ok, gcPercentDefault)
	}
	env["GOGC"] = "100"
	if p, ok := gcPercent(getenv); ok {
		t.Errorf("GOGC=100: gcPercent = %d, %v; want it left alone", p, ok)
	}
}
