package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// TestOnlyTaskCollectionsAreShown: a collection given to the dashboard
// that is no task collection (an application's users) is not listed as
// tasks: its page is a 404 saying why, and the overview names the reason
// in its place, beside the task collection shown as before.
func TestOnlyTaskCollectionsAreShown(t *testing.T) {
	f := newFixture(t, dashboard.Config{})
	users := f.coll.Database().Collection(f.coll.Name() + "_users")
	t.Cleanup(func() { _ = users.Drop(context.Background()) })
	if _, err := users.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "u1"}, {Key: "name", Value: "ann"}, {Key: "status", Value: "active"}}); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(f.coll.Database(), &dashboard.Config{Collections: []string{f.coll.Name(), users.Name()}, Token: fixtureToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	g := &fixture{t: t, coll: f.coll, server: srv, client: srv.Client(), token: fixtureToken}
	g.get("tasks?c="+users.Name()).want(t, "the users collection's tasks", 404, "is not a task collection")
	g.get("tasks?c="+f.coll.Name()).want(t, "the task collection's tasks", 200, "welcome-1")
	g.get("").want(t, "overview", 200, "is not a task collection", f.coll.Name())
}
