package gateway_test

import (
	"testing"

	"github.com/mscheduler/mscheduler/worker/gateway"
)

// TestTokensScopeEveryRoute: a token sees and touches only the tasks of
// its executor's groups and of no group, as its takes claim: another
// group's task is not found (get, cancel), not listed (with or without a
// group filter), and not published; the tasks it may see are served as
// before, and another group's task is left as it was.
func TestTokensScopeEveryRoute(t *testing.T) {
	tokA, tokB := "token-of-a-0123456789", "token-of-b-0123456789"
	f := newFixture(t, &gateway.Config{Tokens: map[string]gateway.Executor{tokA: {ID: "a", Groups: []string{"ga"}}, tokB: {ID: "b", Groups: []string{"gb"}}}})
	for _, c := range []struct{ token, key, group string }{{tokA, "a1", "ga"}, {tokA, "free", ""}, {tokB, "b1", "gb"}} {
		if code, out := f.call("POST", "/tasks", c.token, map[string]any{"key": c.key, "group": c.group}); code != 200 {
			t.Fatalf("publish %s: %d %v", c.key, code, out)
		}
	}
	if code, out := f.call("POST", "/tasks", tokA, map[string]any{"key": "a2", "group": "gb"}); code != 403 || out["field"] != "group" {
		t.Errorf("publish into another group: %d %v, want 403 on group", code, out)
	}
	if code, out := f.call("POST", "/tasks", tokA, map[string]any{"tasks": []any{map[string]any{"key": "a3"}, map[string]any{"key": "a4", "group": "gb"}}}); code != 403 || out["field"] != "tasks[1].group" {
		t.Errorf("publish many, one into another group: %d %v, want 403 on tasks[1].group", code, out)
	}
	if code, out := f.call("GET", "/tasks/b1", tokA, nil); code != 404 {
		t.Errorf("get another group's task: %d %v, want 404", code, out)
	}
	if code, out := f.call("POST", "/tasks/b1/cancel", tokA, map[string]any{}); code != 404 {
		t.Errorf("cancel another group's task: %d %v, want 404", code, out)
	}
	if code, out := f.call("GET", "/tasks?group=gb", tokA, nil); code != 403 || out["field"] != "group" {
		t.Errorf("list another group: %d %v, want 403 on group", code, out)
	}
	code, out := f.call("GET", "/tasks", tokA, nil)
	var keys []string
	for _, task := range out["tasks"].([]any) {
		keys = append(keys, task.(map[string]any)["key"].(string))
	}
	if code != 200 || len(keys) != 2 || keys[0] != "a1" || keys[1] != "free" {
		t.Errorf("list with a's token: %d %v, want a1 and free", code, keys)
	}
	if code, out := f.call("GET", "/tasks/free", tokB, nil); code != 200 {
		t.Errorf("get a task of no group: %d %v, want 200", code, out)
	}
	if code, out := f.call("POST", "/tasks/a1/cancel", tokA, map[string]any{}); code != 200 {
		t.Errorf("cancel its own group's task: %d %v, want 200", code, out)
	}
	if code, out := f.call("GET", "/tasks/b1", tokB, nil); code != 200 || out["status"] != "pending" {
		t.Errorf("b1 after a's tries: %d %v, want pending", code, out)
	}
}
