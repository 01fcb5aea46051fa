package dashboard_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/worker/dashboard"
)

// browser starts headless Chromium (Debian's chromium, which .ci/run
// installs) for one test. Outside CI, a machine without it skips.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is missing: .ci/run installs Debian's chromium package")
		}
		t.Skip("no chromium on this machine (apt-get install chromium) for the browser test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-quic", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 1300))
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	return ctx
}

// shots saves a screenshot of each step where a person can look at it
// when the test fails.
type shots struct {
	t   *testing.T
	dir string
}

func newShots(t *testing.T) *shots {
	dir := filepath.Join(os.TempDir(), "mscheduler-browser-test", t.Name())
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &shots{t: t, dir: dir}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("screenshots of each step are in %s", dir)
		}
	})
	return s
}

// do runs a step's actions, then saves its screenshot.
func (s *shots) do(ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	err := chromedp.Do(ctx, actions...)
	if png, shotErr := chromedp.Run(ctx, chromedp.FullScreenshot(80)); shotErr == nil {
		_ = os.WriteFile(filepath.Join(s.dir, step+".jpg"), png, 0o644)
	}
	if err != nil {
		s.t.Fatalf("%s: %v", step, err)
	}
}

// read runs one action that returns a value.
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestInBrowser: in headless Chromium, a person opens the overview by
// its login link, filters the task list to failed tasks, opens the failed one, clicks
// Retry, and sees it succeed without reloading; then sees the lease
// countdown of a held task move on the workers page.
func TestInBrowser(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, dashboard.Config{})
	shot := newShots(t)
	c := f.coll.Name()
	// A worker that now succeeds, and holds slow-1 until the test ends.
	id := workerOf(f.coll) + "-2"
	if _, err := f.producer.Publish(t.Context(), mscheduler.Task[email]{Key: "slow-1", Params: email{To: "slow@example.com"}}, nil); err != nil {
		t.Fatal(err)
	}
	consumer, err := mscheduler.NewConsumer(f.coll, func(ctx context.Context, task *mscheduler.Task[email]) (string, error) {
		if task.Key == "slow-1" {
			<-ctx.Done()
			return "", context.Cause(ctx)
		}
		return "sent at last", nil
	}, &mscheduler.ConsumerConfig{WorkerID: id, PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = consumer.Stop(stop)
	})
	if err := mscheduler.Heartbeat(t.Context(), f.coll.Database(), mscheduler.WorkerInfo{ID: id, Host: "box", PID: 1,
		Collections: []string{c}, Capacity: 10, HeartbeatMS: 60_000}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mscheduler.Deregister(context.Background(), f.coll.Database(), id) })

	base := f.server.URL + "/"
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// The login link, as the command prints it: the page it lands on has
	// the token out of its address, and the session cookie carries every
	// later page, action and live update.
	shot.do(ctx, "1-overview", chromedp.Navigate(base+"?token="+url.QueryEscape(f.token)), chromedp.WaitVisible(css(`#overview`)),
		chromedp.WaitVisible(css(`a[href="tasks?c=`+c+`&status=failed"]`)))
	if at := read(t, ctx, "the address", chromedp.Evaluate[string](`location.href`)); at != base {
		t.Fatalf("after the login link the page is at %q, want %q", at, base)
	}
	if cookie := read(t, ctx, "the page's cookies", chromedp.Evaluate[string](`document.cookie`)); cookie != "" {
		t.Fatalf("a script reads the cookies %q; the session cookie must be HttpOnly", cookie)
	}

	shot.do(ctx, "2-filtered-list",
		chromedp.Navigate(base+"tasks?"+url.Values{"c": {c}}.Encode()),
		chromedp.SetValue(css(`select[name="status"]`), "failed"),
		chromedp.Click(css(`fieldset button`)),
		// Only the filtered page has the status option selected in its
		// markup: the link to broken-1 is on the unfiltered page too, and
		// reading the list before the new page replaced it would race.
		chromedp.WaitReady(css(`select[name="status"] option[selected]`)),
		chromedp.WaitVisible(css(`a[href*="key=broken-1"]`)))
	if listed := read(t, ctx, "the list", chromedp.Text(css(`#tasks tbody`))); strings.Contains(listed, "welcome-1") || !strings.Contains(listed, "broken-1") {
		t.Fatalf("the failed filter lists:\n%s", listed)
	}

	shot.do(ctx, "3-failed-task", chromedp.Click(css(`a[href*="key=broken-1"]`)), chromedp.WaitVisible(css(`button[value="retry"]`)))
	if status := read(t, ctx, "the status", chromedp.Text(css(`#status`))); !strings.Contains(status, "failed") {
		t.Fatalf("broken-1 shows %q, want failed", status)
	}
	// After the click the page is the task page again (the action's
	// redirect); from there the task must succeed with no reload.
	shot.do(ctx, "4-retry-clicked", chromedp.Click(css(`button[value="retry"]`)), chromedp.WaitVisible(css(`#message`)))
	read(t, ctx, "mark the page", chromedp.Evaluate[string](`window.stayed = "same page"`))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("status").textContent.includes("succeeded")`,
		chromedp.WithPollingTimeout(time.Minute))); err != nil {
		shot.do(ctx, "5-succeeded-live")
		t.Fatalf("broken-1 never showed succeeded: %v", err)
	}
	if marker := read(t, ctx, "the page mark", chromedp.Evaluate[string](`String(window.stayed)`)); marker != "same page" {
		t.Fatalf("the page was reloaded (mark %q)", marker)
	}

	shot.do(ctx, "6-workers", chromedp.Navigate(base+"workers"), chromedp.WaitVisible(css(`#workers .countdown time`)))
	first := read(t, ctx, "the countdown", chromedp.Text(css(`#workers .countdown time`)))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#workers .countdown time").textContent !== `+quoteJS(first),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the lease countdown stayed at %q: %v", first, err)
	}
	later := read(t, ctx, "the countdown", chromedp.Text(css(`#workers .countdown time`)))
	if !strings.HasPrefix(first, "in ") || first == later {
		t.Fatalf("lease countdown read %q, then %q; want it to move", first, later)
	}
	shot.do(ctx, "7-countdown-moved")

	// A destructive action asks first: declined, nothing is done;
	// accepted, the task is deleted.
	exists := func(key string) bool {
		_, err := f.producer.Get(t.Context(), key)
		if err != nil && !errors.Is(err, mscheduler.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	shot.do(ctx, "8-delete-page", chromedp.Navigate(base+f.taskPath("later-1")), chromedp.WaitVisible(css(`button[value="delete"]`)))
	read(t, ctx, "stand in for the confirmation", chromedp.Evaluate[bool](
		`window.asked = []; window.answer = false; window.confirm = function (m) { window.asked.push(m); return window.answer; }; true`))
	shot.do(ctx, "8-delete-declined", chromedp.Click(css(`button[value="delete"]`)))
	asked := read(t, ctx, "what the page asked", chromedp.Evaluate[string](`window.asked ? window.asked.join("|") : "nothing: the page was left without asking"`))
	if !strings.Contains(asked, "Delete later-1?") {
		t.Fatalf("Delete asked %q, want a confirmation naming later-1", asked)
	}
	if !exists("later-1") {
		t.Fatal("later-1 was deleted though the confirmation was declined")
	}
	read(t, ctx, "accept the next confirmation", chromedp.Evaluate[bool](`window.answer = true`))
	shot.do(ctx, "9-delete-accepted", chromedp.Click(css(`button[value="delete"]`)), chromedp.WaitVisible(css(`#message`)))
	if exists("later-1") {
		t.Fatal("later-1 is still there after an accepted delete")
	}
}

// quoteJS makes s a JavaScript string literal.
func quoteJS(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
