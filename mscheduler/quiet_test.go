package mscheduler_test

import (
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestQuietConsumerStretchesItsPollsAndSweeps: a consumer whose collection
// is idle stretches its poll and its sweep interval up to their caps (the
// sweep's larger with a change stream, whose events tell of claims); a publish in
// its process brings its poll back to the interval, and a run held in the
// collection brings the sweeps back and keeps them there, for the sweep
// is how a dead worker's run comes back.
func TestQuietConsumerStretchesItsPollsAndSweeps(t *testing.T) {
	for _, tc := range []struct {
		name              string
		discovery         mscheduler.Discovery
		pollCap, sweepCap int
		poll, sweep       time.Duration
	}{
		// The sweep interval times the cap is more than the held run's
		// lease, so that a quiet sweep sees the run.
		// Polling, the database's shared poll finds what is due: the
		// consumer's own poll is a fallback, stretched as far as with a
		// change stream; its sweeps, which alone find the runs that other
		// processes claim, little.
		{"poll", mscheduler.DiscoveryPoll, mscheduler.QuietPollMaxStream, mscheduler.QuietSweepMaxPoll, 300 * time.Millisecond, 300 * time.Millisecond},
		{"change stream", mscheduler.DiscoveryChangeStream, mscheduler.QuietPollMaxStream, mscheduler.QuietSweepMaxStream, 100 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coll := mschedulertest.Collection(t)
			if tc.discovery == mscheduler.DiscoveryChangeStream && !mschedulertest.HasChangeStreams(ctxT(t), coll) {
				t.Skip("this server has no change streams (a standalone MongoDB, or the development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set): the stream path's caps need them")
			}
			g := make(gate)
			ev := mschedulertest.NewEvents()
			cfg := fastConfig("w", ev)
			cfg.Discovery, cfg.PollInterval, cfg.ChangeStreamPollInterval, cfg.SweepInterval = tc.discovery, tc.poll, tc.poll, tc.sweep
			c := startConsumer(t, coll, g.handler, cfg)
			t.Cleanup(func() { close(g) }) // before the consumer stops

			waitUntil(t, time.Minute, "the idle consumer's poll and sweeps stretched to their caps", func() bool {
				p, s := mscheduler.QuietFactors(c)
				return p == tc.pollCap && s == tc.sweepCap
			})

			// A run held: the poll comes back, and the sweeps come back and
			// stay while it is held.
			p := newProducer[int](t, coll, nil)
			task := mscheduler.Task[int]{Key: "now", WorkerTimeout: time.Second, PingInterval: 200 * time.Millisecond}
			if _, err := p.Publish(ctxT(t), task, nil); err != nil {
				t.Fatal(err)
			}
			ev.WaitCount(t, mscheduler.EventClaimed, 1)
			waitUntil(t, time.Minute, "the sweeps back to their interval while a run is held", func() bool {
				_, s := mscheduler.QuietFactors(c)
				return s == 1
			})
			if p, _ := mscheduler.QuietFactors(c); p == tc.pollCap {
				t.Errorf("the poll still stretched ×%d after a claim", p)
			}
			deadline := time.Now().Add(3 * cfg.SweepInterval * time.Duration(tc.sweepCap))
			for time.Now().Before(deadline) {
				if _, s := mscheduler.QuietFactors(c); s != 1 {
					t.Fatalf("the sweeps stretched ×%d while a run was held", s)
				}
				<-time.After(cfg.SweepInterval)
			}
		})
	}
}
