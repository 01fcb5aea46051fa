// Package node_test runs the JavaScript executor (executor.mjs) against a
// gateway in the test: an executor in a second language, checked against
// the gateway's OpenAPI document as it runs.
package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker/gateway"
)

func TestMain(m *testing.M) { os.Exit(mschedulertest.Main(m)) }

// nodeOrSkip is the path of a Node.js with fetch (18 or later).
func nodeOrSkip(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not on PATH (%v): the JavaScript executor needs Node.js 18 or later", err)
	}
	if err := exec.Command(node, "-e", "process.exit(typeof fetch === 'function' ? 0 : 1)").Run(); err != nil {
		t.Skipf("this node has no fetch (%v): the JavaScript executor needs Node.js 18 or later", err)
	}
	return node
}

// startGateway serves a gateway on a fresh collection, with tasks
// published; it returns the collection and the gateway's handler.
func startGateway(t *testing.T, tasks ...mscheduler.Task[bson.M]) (*mongo.Collection, http.Handler) {
	t.Helper()
	coll := mschedulertest.Collection(t)
	p, err := mscheduler.NewProducer[bson.M](coll, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishMany(t.Context(), tasks, nil); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(coll.Database(), &gateway.Config{Collections: []string{coll.Name()},
		Consumer: mscheduler.ConsumerConfig{PollInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Stop(ctx); err != nil {
			t.Errorf("stop the gateway: %v", err)
		}
	})
	return coll, gw
}

// runExecutor runs executor.mjs against url until it ended runs runs; it
// returns its output lines sorted, its stderr and its error.
func runExecutor(t *testing.T, node, url, coll string, runs string) ([]string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "executor.mjs", url, coll, "node-1", runs)
	var stdout bytes.Buffer
	var stderr mschedulertest.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	slices.Sort(lines)
	return lines, stderr.String(), err
}

// TestJavaScriptExecutor: the executor takes, renews, completes and fails
// runs with every request and answer fitting the OpenAPI document, and
// its runs are held and recorded under its own id.
func TestJavaScriptExecutor(t *testing.T) {
	node := nodeOrSkip(t)
	coll, gw := startGateway(t,
		mscheduler.Task[bson.M]{Key: "area-3", Params: bson.M{"width": 3}},
		mscheduler.Task[bson.M]{Key: "area-4", Params: bson.M{"width": 4}, PingInterval: 100 * time.Millisecond, WorkerTimeout: time.Second},
		mscheduler.Task[bson.M]{Key: "no-width", Params: bson.M{"fail": "no width"}})
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	lines, stderr, err := runExecutor(t, node, srv.URL, coll.Name(), "3")
	if err != nil || stderr != "" {
		t.Fatalf("node executor.mjs: %v\nstdout: %q\nstderr:\n%s", err, lines, stderr)
	}
	if want := []string{"area-3 succeeded", "area-4 succeeded", "no-width failed"}; !slices.Equal(lines, want) {
		t.Errorf("the executor printed %q, want %q", lines, want)
	}
	for key, area := range map[string]int64{"area-3": 9, "area-4": 16} {
		raw, err := coll.FindOne(t.Context(), bson.D{{Key: "key", Value: key}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		by, _ := raw.Lookup("runs", "0", "worker_id").StringValueOK()
		got, ok := raw.Lookup("runs", "0", "result", "area").AsInt64OK()
		if _, err := raw.LookupErr("runs", "1"); err == nil || by != "node-1" || !ok || got != area {
			t.Errorf("%s: runs %v, want one by node-1 with the result {area: %d}", key, raw.Lookup("runs"), area)
		}
	}
}

// TestJavaScriptExecutorChecksTheDocument: the executor's check is real.
// Served a document whose take answer requires a field the gateway does
// not send, it stops at its first take, naming the field.
func TestJavaScriptExecutorChecksTheDocument(t *testing.T) {
	node := nodeOrSkip(t)
	coll, gw := startGateway(t, mscheduler.Task[bson.M]{Key: "area-2", Params: bson.M{"width": 2}})
	gwSrv := httptest.NewServer(gw)
	t.Cleanup(gwSrv.Close)
	target, _ := url.Parse(gwSrv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/openapi.json" {
			return nil
		}
		var doc map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			return err
		}
		resp.Body.Close()
		takeOut := doc["components"].(map[string]any)["schemas"].(map[string]any)["takeOut"].(map[string]any)
		takeOut["required"] = append(takeOut["required"].([]any), "next_take_ms")
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		resp.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	_, stderr, err := runExecutor(t, node, srv.URL, coll.Name(), "1")
	if err == nil || !strings.Contains(stderr, "take 200.next_take_ms: required, missing") {
		t.Errorf("node executor.mjs against a document asking for more than the gateway sends: %v, stderr:\n%s\nwant it to stop naming take 200.next_take_ms", err, stderr)
	}
}
