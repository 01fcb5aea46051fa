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
