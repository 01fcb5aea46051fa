package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

// TestNewServerTimeouts: a reply may take the body's reading, the longest
// wait of a route and a margin; every other time is bounded.
func TestNewServerTimeouts(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*gateway.Config{{Collections: []string{"tasks"}}, {Collections: []string{"tasks"}, MaxWait: 5 * time.Minute}, {Collections: []string{"tasks"}, EndWait: 10 * time.Minute}} {
		gw, err := gateway.New(mschedulertest.Client().Database(mschedulertest.Database), cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := gateway.NewServer(gw)
		longest := max(cmp.Or(cfg.MaxWait, gateway.MaxWaitDefault), cmp.Or(cfg.EndWait, gateway.EndWaitDefault))
		if srv.WriteTimeout <= srv.ReadTimeout+longest {
			t.Errorf("MaxWait %s, EndWait %s: WriteTimeout %s, want more than ReadTimeout %s and the longest wait %s", cfg.MaxWait, cfg.EndWait, srv.WriteTimeout, srv.ReadTimeout, longest)
		}
		if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
			t.Errorf("unbounded: %+v", srv)
		}
	}
}

// TestNewServerShutdownEndsTakes: a take waiting for runs does not hold a
// shutdown for its wait: it answers at once, with no run, and Shutdown
// returns.
func TestNewServerShutdownEndsTakes(t *testing.T) {
	t.Parallel()
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(coll.Database(), &gateway.Config{Collections: []string{coll.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.Stop(ctx)
	}()
	srv := gateway.NewServer(gw)
	// The handler says when a take is served: from then on the shutdown
	// must wait for it, and it must end at once.
	taking := make(chan struct{}, 2)
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/take") {
			taking <- struct{}{}
		}
		inner.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	type answer struct {
		code int
		runs []any
		err  error
	}
	take := func(waitMS int) answer {
		body := strings.NewReader(fmt.Sprintf(`{"executor":"e1","wait_ms":%d}`, waitMS))
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/collections/"+coll.Name()+"/take", "application/json", body)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		var out struct{ Runs []any }
		err = json.NewDecoder(resp.Body).Decode(&out)
		return answer{resp.StatusCode, out.Runs, err}
	}
	// A first take starts the pool, so that the next reads nothing from
	// the database before it waits.
	if a := take(0); a.err != nil || a.code != http.StatusOK {
		t.Fatalf("a take that does not wait: %d (%v)", a.code, a.err)
	}
	<-taking
	answered := make(chan answer, 1)
	go func() { answered <- take(60000) }()
	<-taking
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a take waiting: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	a := <-answered
	if a.err != nil || a.code != http.StatusOK || len(a.runs) != 0 {
		t.Errorf("the waiting take: %d %v (%v), want 200 and no run", a.code, a.runs, a.err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("Shutdown took %s with a take waiting for 60s", took)
	}
}
