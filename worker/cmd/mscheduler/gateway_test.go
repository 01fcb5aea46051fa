package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// gatewayArgs run "mscheduler gateway" on the test server, on a port of
// its choosing.
func gatewayArgs(args ...string) []string {
	return append([]string{"gateway", "--addr", "127.0.0.1:0", "--uri", mschedulertest.URI(), "--db", mschedulertest.Database}, args...)
}

// servingGateway is "mscheduler gateway" running in the test's process.
type servingGateway struct {
	t      *testing.T
	base   string // http://127.0.0.1:PORT, from the line it printed
	stderr *mschedulertest.Buffer
	stop   context.CancelFunc // Ctrl-C
	exited chan int
}

var gatewayLine = regexp.MustCompile(`^gateway at (http://127\.0\.0\.1:[0-9]+)/v1/collections/[^/]+/… \(OpenAPI at (http://127\.0\.0\.1:[0-9]+)/openapi\.json\)\n$`)

// startGateway runs the command with args until the end of the test, and
// returns once it printed its address.
func startGateway(t *testing.T, args ...string) *servingGateway {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	out, stdout := io.Pipe()
	g := &servingGateway{t: t, stderr: &mschedulertest.Buffer{}, stop: stop, exited: make(chan int, 1)}
	go func() {
		code := run(ctx, gatewayArgs(args...), stdout, g.stderr)
		_ = stdout.Close()
		g.exited <- code
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-g.exited:
		case <-time.After(mschedulertest.WaitTimeout):
			t.Errorf("gateway still running %s after Ctrl-C", mschedulertest.WaitTimeout)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, out) }()
	m := gatewayLine.FindStringSubmatch(line)
	if err != nil || m == nil || m[1] != m[2] {
		t.Fatalf("gateway printed %q (%v), want its URL and its OpenAPI document's; stderr:\n%s", line, err, g.stderr.String())
	}
	g.base = m[1]
	return g
}

// exit stops the command as Ctrl-C does and returns its exit status.
func (g *servingGateway) exit() int {
	g.t.Helper()
	g.stop()
	select {
	case code := <-g.exited:
		g.exited <- code // for the cleanup
		return code
	case <-time.After(mschedulertest.WaitTimeout):
		g.t.Fatalf("gateway still running %s after Ctrl-C", mschedulertest.WaitTimeout)
		return -1
	}
}

// call sends a request with a JSON body (none if nil) and the token (none
// if ""), and decodes the JSON answer.
func (g *servingGateway) call(method, path, token string, body any) (int, map[string]any) {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			g.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(g.t.Context(), method, g.base+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		g.t.Fatalf("%s %s: %d, the body is not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// gatewayCollection is a task collection for the test, made as an
// operator makes one before the gateway serves it.
func gatewayCollection(t *testing.T) (*mongo.Collection, string) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	return coll, "/v1/collections/" + coll.Name()
}

// TestGateway: executors publish, take, complete and read tasks through
// the command's gateway; Ctrl-C stops it cleanly.
func TestGateway(t *testing.T) {
	t.Parallel()
	tasks, coll := gatewayCollection(t)
	g := startGateway(t, "--worker-id", "gw-test", "--collections", tasks.Name())
	if code, out := g.call("GET", "/openapi.json", "", nil); code != http.StatusOK || out["openapi"] == nil {
		t.Errorf("GET /openapi.json: %d, want 200 and the document", code)
	}
	code, out := g.call("POST", coll+"/tasks", "", map[string]any{"key": "k1", "params": map[string]any{"to": "ada"}})
	if code != http.StatusOK {
		t.Fatalf("publish: %d %v", code, out)
	}
	run := g.takeOne(coll, "e1")
	if params, _ := run["params"].(map[string]any); run["key"] != "k1" || params["to"] != "ada" {
		t.Fatalf("took %v, want k1 and its params", run)
	}
	code, out = g.call("POST", coll+"/complete", "", map[string]any{"executor": "e1", "run_id": run["run_id"], "result": map[string]any{"sent": true}})
	if code != http.StatusOK || out["outcome"] != "succeeded" {
		t.Fatalf("complete: %d %v", code, out)
	}
	code, out = g.call("GET", coll+"/tasks/k1", "", nil)
	runs, _ := out["runs"].([]any)
	if code != http.StatusOK || out["status"] != "succeeded" || len(runs) != 1 {
		t.Fatalf("get: %d %v, want k1 succeeded with its run", code, out)
	}
	if r, _ := runs[0].(map[string]any); r["worker_id"] != "e1" {
		t.Errorf("the run's worker: %v, want the executor e1 (an executor is a worker)", r["worker_id"])
	}
	// A run an executor holds at Ctrl-C is released: it runs again
	// elsewhere, without waiting for its lease to lapse.
	if code, out := g.call("POST", coll+"/tasks", "", map[string]any{"key": "k2"}); code != http.StatusOK {
		t.Fatalf("publish k2: %d %v", code, out)
	}
	if held := g.takeOne(coll, "e1"); held["key"] != "k2" {
		t.Fatalf("took %v, want k2", held)
	}
	if code := g.exit(); code != exitOK {
		t.Errorf("gateway after Ctrl-C: exit %d, want 0; stderr:\n%s", code, g.stderr.String())
	}
	for _, want := range []string{"no --tokens: this machine's executors only", "stopping:"} {
		if !strings.Contains(g.stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, g.stderr.String())
		}
	}
	p, err := mscheduler.NewProducer[bson.RawValue](tasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := p.Get(t.Context(), "k2")
	if err != nil {
		t.Fatal(err)
	}
	if k2.Status != mscheduler.StatusPending || k2.Running != 0 || k2.FailedRuns != 0 {
		t.Errorf("k2 after Ctrl-C: %s, %d running, %d failed runs; want it pending again, released", k2.Status, k2.Running, k2.FailedRuns)
	}
}

// takeOne takes a run for the executor. The consumer claims as the take
// asks; on a slow server a take may end empty, and the executor takes
// again.
func (g *servingGateway) takeOne(coll, executor string) map[string]any {
	g.t.Helper()
	for deadline := time.Now().Add(mschedulertest.WaitTimeout); ; {
		code, out := g.call("POST", coll+"/take", "", map[string]any{"executor": executor, "wait_ms": 5000})
		runs, _ := out["runs"].([]any)
		switch {
		case code != http.StatusOK || len(runs) > 1:
			g.t.Fatalf("take: %d %v", code, out)
		case len(runs) == 1:
			run, _ := runs[0].(map[string]any)
			return run
		case time.Now().After(deadline):
			g.t.Fatalf("no run taken within %s", mschedulertest.WaitTimeout)
		}
	}
}

// TestGatewayTokens: with --tokens, a request needs one of its tokens.
func TestGatewayTokens(t *testing.T) {
	t.Parallel()
	tasks, coll := gatewayCollection(t)
	const token = "0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(file, []byte(`{"`+token+`": {"executor": "e1", "groups": ["reports"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--tokens", file, "-c", tasks.Name())
	if code, out := g.call("GET", coll+"/tasks", "", nil); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %v, want 401", code, out)
	}
	if code, out := g.call("GET", coll+"/tasks", "not-"+token, nil); code != http.StatusUnauthorized {
		t.Errorf("with another token: %d %v, want 401", code, out)
	}
	if code, out := g.call("GET", coll+"/tasks", token, nil); code != http.StatusOK {
		t.Errorf("with the token: %d %v, want 200", code, out)
	}
	// The token names the executor and its groups.
	if code, out := g.call("POST", coll+"/take", token, map[string]any{"wait_ms": 0}); code != http.StatusOK {
		t.Errorf("take with the token: %d %v, want 200", code, out)
	}
	if code, out := g.call("POST", coll+"/take", token, map[string]any{"executor": "e2"}); code != http.StatusForbidden {
		t.Errorf("take for another executor: %d %v, want 403", code, out)
	}
	if strings.Contains(g.stderr.String(), token) {
		t.Errorf("stderr shows the token:\n%s", g.stderr.String())
	}
}

// TestGatewayUsageErrors: a --tokens file the gateway cannot use, or an
// address beyond loopback without one, is refused before anything is
// served.
func TestGatewayUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokensFile := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const long = "0123456789abcdef"
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"tokens not JSON", []string{"--tokens", tokensFile("bad.json", `{"`+long+`": `)}, []string{"--tokens", "not a JSON object of tokens"}},
		{"tokens a list", []string{"--tokens", tokensFile("list.json", `["`+long+`"]`)}, []string{"--tokens", "not a JSON object of tokens"}},
		{"tokens unknown field", []string{"--tokens", tokensFile("field.json", `{"`+long+`": {"executor": "e1", "group": "g"}}`)}, []string{"--tokens", `unknown field "group"`}},
		{"no executor", []string{"--tokens", tokensFile("noexec.json", `{"`+long+`": {"groups": ["g"]}}`)}, []string{"--tokens", `has no "executor"`}},
		{"short token", []string{"--tokens", tokensFile("short.json", `{"short": {"executor": "e1"}}`)}, []string{"--tokens", `executor "e1" has 5 characters, want 16 or more`}},
		{"no tokens", []string{"--tokens", tokensFile("empty.json", `{}`)}, []string{"--tokens", "no tokens"}},
		{"bad executor", []string{"--tokens", tokensFile("dot.json", `{"`+long+`": {"executor": "e.1"}}`)}, []string{"--tokens", `executor "e.1"`}},
		{"tokens missing", []string{"--tokens", filepath.Join(dir, "none.json")}, []string{"--tokens", "no such file"}},
		{"beyond loopback without tokens", []string{"--addr", "0.0.0.0:0"}, []string{"--addr 0.0.0.0:0", "without --tokens", "this machine's peers only", "give --tokens FILE"}},
		{"capacity", []string{"--capacity", "0"}, []string{"--capacity must be at least 1"}},
		{"worker id", []string{"--worker-id", "$gw"}, []string{"--worker-id"}},
		{"argument", []string{"extra"}, []string{"gateway takes no arguments"}},
		{"no collections", nil, []string{"name the task collections to serve", "--collections"}},
		{"the registry", []string{"--collections", "jobs,mscheduler.workers"}, []string{"--collections", "mscheduler.workers", "worker registry"}},
		{"history", []string{"-c", "jobs.runs"}, []string{"--collections", "jobs.runs", "run history"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), gatewayArgs(tc.args...), &stdout, &stderr)
			r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
			r.wantError(t, exitUsage, tc.want...)
			if strings.Contains(r.stderr, long) {
				t.Errorf("stderr shows a token: %q", r.stderr)
			}
		})
	}
}

// TestGatewayServesOnlyItsCollections: the gateway serves the collections
// it is given and answers 404 for any other; it refuses to start on a
// collection that does not exist (unless --create, which makes it a task
// collection) or that holds documents and is no task collection.
func TestGatewayServesOnlyItsCollections(t *testing.T) {
	t.Parallel()
	tasks, served := gatewayCollection(t)
	fresh := tasks.Name() + "_new"
	users := tasks.Database().Collection(tasks.Name() + "_users")
	t.Cleanup(func() {
		for _, name := range []string{fresh, fresh + ".meta", fresh + ".runs", users.Name()} {
			_ = tasks.Database().Collection(name).Drop(context.Background())
		}
	})
	if _, err := users.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "u1"}, {Key: "name", Value: "ann"}}); err != nil {
		t.Fatal(err)
	}
	refused := func(want []string, args ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), gatewayArgs(args...), &stdout, &stderr)
		result{code: code, stdout: stdout.String(), stderr: stderr.String()}.wantError(t, exitError, want...)
	}
	refused([]string{fresh, "does not exist", "--create makes it"}, "--collections", fresh)
	refused([]string{users.Name(), "is not a task collection", "migrate --adopt"}, "--collections", tasks.Name()+","+users.Name())

	g := startGateway(t, "--collections", tasks.Name()+","+fresh, "--create")
	for _, coll := range []string{served, "/v1/collections/" + fresh} {
		if code, out := g.call("GET", coll+"/tasks", "", nil); code != http.StatusOK {
			t.Errorf("GET %s/tasks: %d %v, want 200", coll, code, out)
		}
	}
	if code, out := g.call("GET", "/v1/collections/"+users.Name()+"/tasks", "", nil); code != http.StatusNotFound || out["field"] != "collection" {
		t.Errorf("a collection not given: %d %v, want 404 about the collection", code, out)
	}
	if err := mscheduler.CheckTaskCollection(t.Context(), tasks.Database().Collection(fresh)); err != nil {
		t.Errorf("the collection --create made: %v, want a task collection", err)
	}
}
