package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// upkeepDigest says what each worker incarnation's upkeep did since from,
// from its DEBUG lines: for a lapsed lease that stayed, whether the
// others swept, how often and how slowly, and whether its holder was
// alive. The holder's last log lines follow.
func upkeepDigest(pool *workerPool, holder string, from time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "upkeep of each worker since %s:", from.Format("15:04:05.000"))
	for _, p := range pool.incarnations() {
		fmt.Fprintf(&b, "\n  %s%s: %s", p.id, exitedNote(p), digestLog(p.errPath, from))
	}
	for _, p := range pool.incarnations() {
		if p.id == holder {
			fmt.Fprintf(&b, "\n  last lines of %s:\n%s", holder, indent(p.stderrTail()))
		}
	}
	return b.String()
}

func exitedNote(p *workerProc) string {
	select {
	case <-p.exited:
		return " (exited)"
	default:
		return ""
	}
}

// stepStats are one upkeep step's lines since a time.
type stepStats struct {
	n       int
	longest time.Duration
	last    time.Time
	errors  int
}

func (s stepStats) String() string {
	if s.n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d (longest %s, last %s, %d errors)", s.n, s.longest, s.last.Format("15:04:05.000"), s.errors)
}

// digestLog sums up a worker's log since from: its sweeps, maintenance
// turns and checks, its pings and claims, and its last line.
func digestLog(path string, from time.Time) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	steps := map[string]*stepStats{"swept": {}, "maintenance turn": {}, "checked": {}}
	var pings, claims int
	var lastLine time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			Time  time.Time      `json:"time"`
			Msg   string         `json:"msg"`
			Took  loggedDuration `json:"took"`
			Error string         `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		lastLine = rec.Time
		if rec.Time.Before(from) {
			continue
		}
		switch rec.Msg {
		case "ping":
			pings++
		case "claimed":
			claims++
		}
		s, ok := steps[rec.Msg]
		if !ok {
			continue
		}
		s.n++
		s.last = rec.Time
		s.longest = max(s.longest, time.Duration(rec.Took))
		if rec.Error != "" {
			s.errors++
		}
	}
	return fmt.Sprintf("sweeps %v; maintenance turns %v; checks %v; pings %d, claims %d; last line %s",
		steps["swept"], steps["maintenance turn"], steps["checked"], pings, claims, lastLine.Format("15:04:05.000"))
}

// loggedDuration reads a duration as slog's JSON handler writes it (a
// number of nanoseconds) or as a text handler's value would read ("1.5s").
type loggedDuration time.Duration

func (d *loggedDuration) UnmarshalJSON(b []byte) error {
	var ns int64
	if err := json.Unmarshal(b, &ns); err == nil {
		*d = loggedDuration(ns)
		return nil
	}
	var text string
	if err := json.Unmarshal(b, &text); err != nil {
		return err
	}
	v, err := time.ParseDuration(text)
	*d = loggedDuration(v)
	return err
}

func indent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if len(l) > 400 {
			l = l[:400] + "..."
		}
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

func TestDigestLogCountsUpkeepSinceItsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.stderr")
	lines := `{"time":"2026-01-01T10:00:00Z","level":"DEBUG","msg":"swept","took":"5s"}
{"time":"2026-01-01T10:00:10Z","level":"DEBUG","msg":"swept","took":20000000}
{"time":"2026-01-01T10:00:11Z","level":"DEBUG","msg":"swept","took":1500000000,"error":"timeout"}
{"time":"2026-01-01T10:00:12Z","level":"DEBUG","msg":"ping","runs":1}
not json
{"time":"2026-01-01T10:00:13Z","level":"DEBUG","msg":"checked","took":"3s"}
`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got := digestLog(path, time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC))
	want := "sweeps 2 (longest 1.5s, last 10:00:11.000, 1 errors); maintenance turns none; checks 1 (longest 3s, last 10:00:13.000, 0 errors); pings 1, claims 0; last line 10:00:13.000"
	if got != want {
		t.Errorf("digest:\n got %s\nwant %s", got, want)
	}
}
