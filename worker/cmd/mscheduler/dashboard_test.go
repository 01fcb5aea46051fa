package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
	"github.com/mscheduler/mscheduler/worker"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// TestDashboardDemo: with no server set, "mscheduler dashboard" starts the
// development server, publishes the demo tasks and runs the demo worker,
// so the first page a new user opens, by the login link it prints, is
// populated and moving.
func TestDashboardDemo(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "dashboard", "--addr", "127.0.0.1:0")
	cmd.Env = dashboardEnv()
	stderr := &mschedulertest.Buffer{}
	cmd.Stderr = stderr
	cmd, link := startServing(t, cmd, "http://127.0.0.1:")
	client, base := logIn(t, link)
	get := func(path string) string {
		t.Helper()
		code, body := fetch(t, client, http.MethodGet, base+path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		return body
	}
	// The demo worker runs in the command's process: there is no event to
	// wait on from here, so look until the pages show its work.
	deadline := time.Now().Add(mschedulertest.WaitTimeout)
	for {
		overview, workers := get(""), get("workers")
		if strings.Contains(overview, "tasks?c=emails&amp;status=succeeded") && strings.Contains(overview, "tasks?c=reports") &&
			strings.Contains(workers, "demo-worker") && strings.Contains(workers, "bar o-succeeded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not show its work; overview:\n%.3000s\nworkers:\n%.3000s", overview, workers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The demo's server, for the command and mongosh.
	if !strings.Contains(stderr.String(), "development server at mongodb://127.0.0.1:") || !strings.Contains(stderr.String(), worker.EnvURI+"=mongodb://") {
		t.Errorf("the demo did not say where its server is; stderr:\n%s", stderr.String())
	}
	if page := get("task?c=reports&key=long-export"); !strings.Contains(page, "a long export") || !strings.Contains(page, `value="cancel"`) {
		t.Errorf("the long export's page, with its actions:\n%.3000s", page)
	}
	// As a service manager stops it (Ctrl-C takes the same path).
	stopServing(t, cmd)
}

// TestDashboardTokens: with no token set, the command makes one and prints
// its login link, which logs a browser in to act; --read-only makes none
// and prints the bare address, which serves the pages without actions; a
// token from the environment is needed and never printed.
func TestDashboardTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	serve := func(env []string, flags ...string) (*exec.Cmd, string, *mschedulertest.Buffer) {
		t.Helper()
		args := append([]string{"dashboard", "--addr", "127.0.0.1:0", "--db", mschedulertest.Database, "-c", f.coll.Name()}, flags...)
		cmd := exec.Command(binary, args...)
		cmd.Env = dashboardEnv(append(serverEnv(), env...)...)
		stderr := &mschedulertest.Buffer{}
		cmd.Stderr = stderr
		cmd, line := startServing(t, cmd, "http://127.0.0.1:")
		return cmd, line, stderr
	}
	taskPage := "task?c=" + url.QueryEscape(f.coll.Name()) + "&key=welcome-2"

	t.Run("made", func(t *testing.T) {
		cmd, link, stderr := serve(nil)
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		if token := u.Query().Get("token"); len(token) < 32 || strings.Trim(token, "0123456789abcdef") != "" {
			t.Fatalf("dashboard printed %q, want a login link with a made token of 16 bytes or more, in hex", link)
		}
		client, base := logIn(t, link)
		if code, page := fetch(t, client, http.MethodGet, base+taskPage, nil); code != http.StatusOK || !strings.Contains(page, `value="pause"`) {
			t.Fatalf("the task page after login: %d, want 200 with its actions:\n%.2000s", code, page)
		}
		if code, _ := fetch(t, http.DefaultClient, http.MethodGet, base, nil); code != http.StatusUnauthorized {
			t.Errorf("a page without the token: %d, want 401", code)
		}
		form := url.Values{"action": {"pause"}, "seen": {"pending"}}
		if code, page := fetch(t, client, http.MethodPost, base+taskPage, form); code != http.StatusOK || !strings.Contains(page, "Done: pause.") {
			t.Fatalf("pause with the session: %d, want the task page saying it was done:\n%.2000s", code, page)
		}
		if !f.get("welcome-2").Paused {
			t.Fatal("the pause did not pause welcome-2")
		}
		stopServing(t, cmd)
		for _, want := range []string{"actions need the token in that link", "made anew at each start", dashboard.EnvToken} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
			}
		}
	})

	t.Run("read-only", func(t *testing.T) {
		cmd, base, _ := serve(nil, "--read-only")
		if strings.Contains(base, "?") || !strings.HasSuffix(base, "/") {
			t.Fatalf("dashboard --read-only printed %q, want the bare address", base)
		}
		code, page := fetch(t, http.DefaultClient, http.MethodGet, base+taskPage, nil)
		if code != http.StatusOK || !strings.Contains(page, "started read-only") || strings.Contains(page, `name="action"`) {
			t.Fatalf("a read-only task page: %d, want 200 saying it is read-only, with no action:\n%.2000s", code, page)
		}
		stopServing(t, cmd)
	})

	t.Run("from the environment", func(t *testing.T) {
		const chosen = "chosen-s3cret"
		cmd, base, stderr := serve([]string{dashboard.EnvToken + "=" + chosen})
		if strings.Contains(base, "?") {
			t.Fatalf("with %s set the command printed %q, want the bare address", dashboard.EnvToken, base)
		}
		if code, _ := fetch(t, http.DefaultClient, http.MethodGet, base, nil); code != http.StatusUnauthorized {
			t.Errorf("a page without the token: %d, want 401", code)
		}
		client, _ := logIn(t, base+"?token="+chosen)
		if code, page := fetch(t, client, http.MethodGet, base+taskPage, nil); code != http.StatusOK || !strings.Contains(page, `name="action"`) {
			t.Errorf("the task page with the chosen token: %d, want 200 with actions", code)
		}
		stopServing(t, cmd)
		if strings.Contains(stderr.String(), chosen) || strings.Contains(stderr.String(), "made anew") {
			t.Errorf("with a chosen token, stderr:\n%s", stderr.String())
		}
	})
}

// dashboardEnv is the test's environment without a server or a dashboard
// token, plus extra.
func dashboardEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, worker.EnvURI+"=") && !strings.HasPrefix(kv, dashboard.EnvToken+"=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// logIn opens a login link as a browser does, and returns a client that
// keeps the session cookie, and the dashboard's address. The link must
// land on the same page without its token.
func logIn(t *testing.T, link string) (*http.Client, string) {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	if u.Query().Get("token") == "" {
		t.Fatalf("login link %q: want a token", link)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar}
	resp, err := client.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	base := u.Scheme + "://" + u.Host + "/"
	if resp.StatusCode != http.StatusOK || resp.Request.URL.String() != base {
		t.Fatalf("login link %q: %s at %s, want 200 at %s", link, resp.Status, resp.Request.URL, base)
	}
	return client, base
}

// fetch sends a request, a POST of form when it is set, as the dashboard's
// own page would (same origin), and reads the reply.
func fetch(t *testing.T, client *http.Client, method, target string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", req.URL.Scheme+"://"+req.URL.Host)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(text)
}

// stopServing stops a serving command as a service manager does (Ctrl-C
// takes the same path) and waits for it to exit cleanly.
func stopServing(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dashboard after SIGTERM: %v", err)
		}
	case <-time.After(mschedulertest.WaitTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("dashboard still running %s after SIGTERM", mschedulertest.WaitTimeout)
	}
}
