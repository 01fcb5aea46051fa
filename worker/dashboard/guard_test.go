package dashboard

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// guarded is a dashboard of a fresh collection, for requests made by hand.
func guarded(t *testing.T, cfg Config) *Dashboard {
	t.Helper()
	coll := mschedulertest.Collection(t)
	cfg.Collections = []string{coll.Name()}
	d, err := New(coll.Database(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// request serves one request made by hand: its Host, its peer, and, for
// a POST, a form body.
func request(d *Dashboard, method, host, peer, path string, form url.Values, header http.Header) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, path, body)
	r.Host, r.RemoteAddr = host, peer
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	return w
}

const loopbackPeer = "127.0.0.1:50000"

// TestRebindingIsRefused: a page of another site whose name was rebound
// to the dashboard's address sends its own name as Host, and its Origin
// matches it, so cross-origin checks pass; the Host check refuses it, for
// reads and actions alike, before anything is read or written.
func TestRebindingIsRefused(t *testing.T) {
	d := guarded(t, Config{})
	attacker := "attacker.example:18080"
	for _, c := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/", nil},
		{"GET", "/tasks", nil},
		{"POST", "/task?c=x&key=k", url.Values{"action": {"delete"}, "seen": {"pending"}}},
	} {
		w := request(d, c.method, attacker, loopbackPeer, c.path, c.form, http.Header{"Origin": {"http://" + attacker}})
		if w.Code != http.StatusMisdirectedRequest || !strings.Contains(w.Body.String(), "AllowedHosts") {
			t.Errorf("%s %s for Host %s: %d %q, want 421 naming AllowedHosts", c.method, c.path, attacker, w.Code, w.Body.String())
		}
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST"} {
		if w := request(d, "GET", host, loopbackPeer, "/static/live.js", nil, nil); w.Code != http.StatusOK {
			t.Errorf("GET for loopback Host %s: %d, want 200", host, w.Code)
		}
	}
}

// TestAllowedHostsAndTokens: a name of AllowedHosts is answered, and an
// IP address, which cannot be rebound; another name is refused, even with
// a token (a rebound page could still load the login page); without a
// token, only this machine's peers are answered.
func TestAllowedHostsAndTokens(t *testing.T) {
	named := guarded(t, Config{AllowedHosts: []string{"dash.internal"}})
	if w := request(named, "GET", "dash.internal:8080", loopbackPeer, "/static/live.js", nil, nil); w.Code != http.StatusOK {
		t.Errorf("an allowed host: %d, want 200", w.Code)
	}
	if w := request(named, "GET", "other.internal", loopbackPeer, "/static/live.js", nil, nil); w.Code != http.StatusMisdirectedRequest {
		t.Errorf("a host not allowed: %d, want 421", w.Code)
	}
	if w := request(named, "GET", "dash.internal", "10.1.2.3:40000", "/static/live.js", nil, nil); w.Code != http.StatusForbidden {
		t.Errorf("no token, a peer on another machine: %d, want 403", w.Code)
	}
	tokened := guarded(t, Config{Token: "s3cret", AllowedHosts: []string{"dash.example.com"}})
	if w := request(tokened, "GET", "dash.example.com", "10.1.2.3:40000", "/static/live.js", nil, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("a token set, no token sent: %d, want 401", w.Code)
	}
	bearer := http.Header{"Authorization": {"Bearer s3cret"}}
	if w := request(tokened, "GET", "dash.example.com", "10.1.2.3:40000", "/static/live.js", nil, bearer); w.Code != http.StatusOK {
		t.Errorf("a token set and sent, from another machine: %d, want 200", w.Code)
	}
	if w := request(tokened, "GET", "10.0.0.7:8080", "10.1.2.3:40000", "/static/live.js", nil, bearer); w.Code != http.StatusOK {
		t.Errorf("an IP address as Host: %d, want 200", w.Code)
	}
	if w := request(tokened, "GET", "rebound.attacker.example", "10.1.2.3:40000", "/static/live.js", nil, bearer); w.Code != http.StatusMisdirectedRequest {
		t.Errorf("a token set, a name not allowed: %d, want 421", w.Code)
	}
	for addr, want := range map[string]string{"dash.internal:8080": "dash.internal", "0.0.0.0:8080": "", ":8080": "", "[::1]:80": "", "localhost:80": "", "10.0.0.7:80": ""} {
		if got := ListenName(addr); got != want {
			t.Errorf("ListenName(%q) = %q, want %q", addr, got, want)
		}
	}
	if _, err := New(nil, &Config{AllowedHosts: []string{"http://dash.internal"}}); err == nil || !strings.Contains(err.Error(), "AllowedHosts[0]") {
		t.Errorf("a URL in AllowedHosts: %v, want an error naming AllowedHosts[0]", err)
	}
}

// TestEveryReplyRefusesFraming: pages, refusals and errors alike say they
// may not be framed by another page.
func TestEveryReplyRefusesFraming(t *testing.T) {
	d := guarded(t, Config{})
	for _, w := range []*httptest.ResponseRecorder{
		request(d, "GET", "localhost", loopbackPeer, "/static/live.js", nil, nil),
		request(d, "GET", "localhost", loopbackPeer, "/no-such-page", nil, nil),
		request(d, "GET", "evil.example", loopbackPeer, "/", nil, nil),
	} {
		h := w.Header()
		if h.Get("X-Frame-Options") != "DENY" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("reply %d has headers %v, want framing refused and no sniffing", w.Code, h)
		}
	}
}

// TestLargeBodiesAreRefused: a body past MaxBodyBytes is refused with 413,
// whether it says its length or not, and the action is not done.
func TestLargeBodiesAreRefused(t *testing.T) {
	// With a token, so that the body is read: a dashboard without one
	// refuses every POST before its body.
	d := guarded(t, Config{MaxBodyBytes: 1024, Token: "s3cret"})
	bearer := http.Header{"Authorization": {"Bearer s3cret"}}
	big := url.Values{"action": {"delete"}, "seen": {strings.Repeat("x", 2048)}}
	if w := request(d, "POST", "localhost", loopbackPeer, "/task?c=x&key=k", big, bearer); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared 2 KiB body: %d, want 413", w.Code)
	}
	r := httptest.NewRequest("POST", "/tasks?c=x", strings.NewReader(big.Encode()))
	r.Host, r.RemoteAddr, r.ContentLength = "localhost", loopbackPeer, -1 // chunked: no length said
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Authorization", "Bearer s3cret")
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("an undeclared 2 KiB body: %d %q, want 413", w.Code, w.Body.String())
	}
}

// TestEventStreamsAreBounded: past MaxEventStreams open streams, another
// is refused with 503 and Retry-After; one closing makes room.
func TestEventStreamsAreBounded(t *testing.T) {
	d := guarded(t, Config{MaxEventStreams: 2})
	srv := httptest.NewServer(d)
	defer srv.Close()
	var leaves []func()
	for range 2 {
		resp, leave := openEvents(t, srv.Client(), srv.URL, "")
		leaves = append(leaves, leave)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream within the bound: %s", resp.Status)
		}
	}
	resp, leave := openEvents(t, srv.Client(), srv.URL, "")
	leave()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third stream: %s (Retry-After %q), want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	leaves[0]()
	waitFor(t, "a stream closed to make room", func() bool {
		resp, leave := openEvents(t, srv.Client(), srv.URL, "")
		defer leave()
		return resp.StatusCode == http.StatusOK
	})
	leaves[1]()
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
