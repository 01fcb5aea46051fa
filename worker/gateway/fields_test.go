package gateway

import "testing"

func TestJSONFieldOf(t *testing.T) {
	for in, want := range map[string]string{
		`Headers["Foo.Bar"]`: `headers["Foo.Bar"]`, `tasks[1].RunAt`: `tasks[1].run_at`, `WorkerIDs[0]`: `worker_ids[0]`,
		`PingInterval`: `ping_interval_ms`, `Plan.Zone`: `plan.zone`, `Key`: `key`,
	} {
		if got := jsonFieldOf(in); got != want {
			t.Errorf("jsonFieldOf(%s) = %s, want %s", in, got, want)
		}
	}
	if got := jsonNamesIn("must be shorter than WorkerTimeout (1s)"); got != "must be shorter than worker_timeout_ms (1s)" {
		t.Errorf("jsonNamesIn: %s", got)
	}
}
