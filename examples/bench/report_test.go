package main

import (
	"strings"
	"testing"
	"time"
)

func TestThroughputTargets(t *testing.T) {
	run := func(publish, drain time.Duration) runStats {
		return runStats{Tasks: 100, Succeeded: 100, Publish: publish, Drain: drain}
	}
	sec := time.Second
	r := &report{Capacity: 16, EndToEnd: []endToEnd{
		{Workers: 1, Raw: run(10*sec, 100*sec), Library: run(10*sec, 50*sec)},
		// W=4: end to end 110/35 = 3.14, drain 100/25 = 4.
		{Workers: 4, Raw: run(10*sec, 100*sec), Library: run(10*sec, 25*sec)},
		// W=8: end to end 110/40 = 2.75, drain 100/30 = 3.33.
		{Workers: 8, Raw: run(10*sec, 100*sec), Library: run(10*sec, 30*sec)},
	}}
	got := map[string]target{}
	for _, tg := range r.throughputTargets() {
		got[tg.name] = tg
	}
	e2e, drain := got["end to end >= 3x raw at W >= 4"], got["drain >= 3x raw at W >= 4"]
	if e2e.met || !strings.HasPrefix(e2e.value, "2.75 at worst (W=8)") {
		t.Errorf("end to end target = %+v, want 2.75 at W=8, missed", e2e)
	}
	if !drain.met || !strings.HasPrefix(drain.value, "3.33 at worst (W=8)") {
		t.Errorf("drain target = %+v, want 3.33 at W=8, met", drain)
	}

	one := &report{Capacity: 1, EndToEnd: []endToEnd{{Workers: 1, Raw: run(10*sec, 80*sec), Library: run(10*sec, 85*sec)}}} // 90/95 = 0.95
	ts := one.throughputTargets()
	if len(ts) != 1 || ts[0].name != "one slot, end to end >= 0.9x raw" || !ts[0].met || !strings.HasPrefix(ts[0].value, "0.95") {
		t.Errorf("one-slot targets = %+v, want 0.95, met", ts)
	}
	if !strings.Contains(r.targetLine(), "drain >= 3x raw at W >= 4: 3.33 at worst (W=8), met") {
		t.Errorf("target line lacks the drain target: %s", r.targetLine())
	}
}

func TestIdleSectionAndTargets(t *testing.T) {
	window := 10 * time.Second
	count := func(n int, lib, raw map[string]int64) idleCount {
		return idleCount{Collections: n, Window: window, Library: lib, Raw: raw}
	}
	r := &report{Idle: idleResult{Settle: time.Second, Window: window, StreamNA: "n/a (no change streams)", Poll: []idleCount{
		count(1, map[string]int64{"find": 10, "findAndModify": 10, "update": 2}, map[string]int64{"find": 10}), // 2.2/s
		count(50, map[string]int64{"find": 60, "findAndModify": 30}, map[string]int64{"find": 500}),            // 9/s
	}}}
	ts := r.idleTargets()
	if len(ts) != 1 || ts[0].name != "50 idle collections <= 10 commands/s without change streams" || !ts[0].met ||
		ts[0].value != "9.0/s (0.18 per collection)" {
		t.Errorf("targets without change streams = %+v, want 9.0/s, met, and no change-stream target", ts)
	}

	s := r.idleSection()
	rows := map[string]row{}
	for _, rw := range s.rows {
		rows[rw.name] = rw
	}
	for name, want := range map[string][2]string{
		"N=1, polling, all together":    {"2.20", "1.00"},
		"N=50, polling, all together":   {"9.00", "50.00"},
		"N=50, polling, per collection": {"0.18", "1.00"},
		"change streams":                {"n/a (no change streams)", "-"},
	} {
		if rw, ok := rows[name]; !ok || rw.lib != want[0] || rw.raw != want[1] {
			t.Errorf("row %q = %+v, want library %s, raw %s", name, rw, want[0], want[1])
		}
	}

	var out strings.Builder
	r.printIdleCommandNames(&out)
	for _, want := range []string{"lib N=50  raw N=50", "findAndModify           1.00      0.00      3.00      0.00", "update"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("commands by name lack %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "did not keep up") {
		t.Errorf("a server that kept up with the raw poller is said not to have:\n%s", out.String())
	}
	r.Idle.Poll[1].Raw["find"] = 200 // 20/s of its 50
	out.Reset()
	r.printIdleCommandNames(&out)
	if want := "N=50, polling: the raw poller sent 0.40 of its finds: the server did not keep up"; !strings.Contains(out.String(), want) {
		t.Errorf("commands by name lack %q:\n%s", want, out.String())
	}

	// With change streams, 3/s at 50 collections misses its bound of 2,
	// and polling at 11/s misses its bound of 10.
	r.Idle.StreamNA = ""
	r.Idle.Poll[1].Library["update"] = 20
	r.Idle.Stream = []idleCount{count(50, map[string]int64{"getMore": 30}, map[string]int64{"find": 500})}
	got := map[string]target{}
	for _, tg := range r.idleTargets() {
		got[tg.name] = tg
	}
	poll, stream := got["50 idle collections <= 10 commands/s without change streams"], got["50 idle collections <= 2 commands/s with change streams"]
	if poll.met || poll.value != "11.0/s (0.22 per collection)" || stream.met || stream.value != "3.0/s (0.06 per collection)" {
		t.Errorf("targets = %+v, want 11.0/s and 3.0/s, both missed", got)
	}
	if line := r.targetLine(); !strings.Contains(line, "with change streams: 3.0/s (0.06 per collection), MISSED") {
		t.Errorf("target line lacks the change-stream target: %s", line)
	}
}
