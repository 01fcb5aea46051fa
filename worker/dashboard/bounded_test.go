package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// queryLog records the reads a dashboard sends, by command.
type queryLog struct {
	mu      sync.Mutex
	queries []string // one line per read: the command and what bounds it
	faults  []string // the reads missing a bound
}

func (l *queryLog) started(_ context.Context, e *event.CommandStartedEvent) {
	switch e.CommandName {
	case "find", "aggregate", "count", "distinct":
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf("%s %s", e.CommandName, e.Command)
	l.queries = append(l.queries, line)
	ms, err := e.Command.LookupErr("maxTimeMS")
	if n, ok := ms.AsInt64OK(); err != nil || !ok || n <= 0 || n > (10*time.Second).Milliseconds() {
		l.faults = append(l.faults, "no maxTimeMS within the query timeout: "+line)
	}
	if e.CommandName == "find" {
		if n, ok := e.Command.Lookup("limit").AsInt64OK(); !ok || n <= 0 {
			l.faults = append(l.faults, "no limit: "+line)
		}
	}
}

// TestEveryQueryIsBounded: each page, with each filter, sends only reads
// that carry a maxTimeMS and, for a find, a limit, so that no page can keep
// the server busy for the workers.
func TestEveryQueryIsBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dashboard.Config{})
	log := &queryLog{}
	client := mschedulertest.NewClient(t, options.Client().SetMonitor(&event.CommandMonitor{Started: log.started}))
	d, err := dashboard.New(client.Database(f.coll.Database().Name()), &dashboard.Config{Collections: []string{f.coll.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	c := f.coll.Name()
	for _, path := range []string{
		"", "tasks?c=" + c, "tasks?c=" + c + "&status=failed&limit=5", "tasks?c=" + c + "&prefix=wel&tag=mail",
		"tasks?c=" + c + "&worker=" + workerOf(f.coll), "tasks?c=" + c + "&after=broken-1",
		"task?c=" + c + "&key=broken-1", "task?c=" + c + "&key=report-hourly", "workers", "schedules?c=" + c,
	} {
		resp, err := srv.Client().Get(srv.URL + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", path, resp.StatusCode)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.queries) < 10 {
		t.Fatalf("only %d reads seen; the monitor is not on the dashboard's client:\n%s", len(log.queries), strings.Join(log.queries, "\n"))
	}
	for _, fault := range log.faults {
		t.Error(fault)
	}
}
