package runend

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestRidersFillABatchToItsBound: a batch of run ends takes carried
// statements (history marks' removals) only up to its bound, the larger of
// its EndBatchMax and query.MaxStatements, and leaves the rest: FerretDB
// holds a pool connection per statement of an update until the command
// ends, and a command of more statements than its pool wedged the
// development server.
func TestRidersFillABatchToItsBound(t *testing.T) {
	for _, c := range []struct{ max, ends, carried, taken, left int }{
		{64, 60, 150, 4, 146}, {64, 64, 10, 0, 10}, {64, 2, 10, 10, 0}, {1, 2, 100, 62, 38}, {200, 64, 300, 136, 164},
	} {
		b := &Batcher{max: c.max}
		b.Carry(make([]mongo.WriteModel, c.carried))
		taken := len(b.TakeRiders(c.ends))
		if left := len(b.TakeCarried()); taken != c.taken || left != c.left {
			t.Errorf("EndBatchMax %d, %d run ends, %d carried: took %d and left %d, want %d and %d", c.max, c.ends, c.carried, taken, left, c.taken, c.left)
		}
	}
}

// TestAnEndNotTakenByItsSendByGoesAlone: while the batcher's loop writes
// another batch it takes no end; an end it has not taken by its SendBy is
// left to be written alone, at once when SendBy has passed, so that its
// write can still land within its lease. Without a SendBy, it waits.
func TestAnEndNotTakenByItsSendByGoesAlone(t *testing.T) {
	b := NewBatcher(nil, "w1", 8, 0, func() int { return 1 }) // no loop: as busy as a loop gets
	for _, c := range []struct {
		name   string
		sendBy time.Duration
	}{{"send-by ahead", 50 * time.Millisecond}, {"send-by passed", -time.Second}} {
		began := time.Now()
		err := writeWithin(b, &End{SendBy: began.Add(c.sendBy)}, 10*time.Second)
		if !errors.Is(err, ErrWriteAlone) {
			t.Fatalf("%s: Write = %v, want ErrWriteAlone", c.name, err)
		}
		if took := time.Since(began); took < c.sendBy {
			t.Errorf("%s: Write gave up after %s, before its send-by (%s)", c.name, took, c.sendBy)
		}
	}
	waiting := make(chan error, 1)
	go func() { waiting <- b.Write(&End{}) }()
	select {
	case err := <-waiting:
		t.Errorf("without a send-by, Write = %v while the loop took nothing; want it to wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(b.done) // as a loop that returned: the waiting end goes alone
	if err := <-waiting; !errors.Is(err, ErrWriteAlone) {
		t.Errorf("after the loop returned, Write = %v, want ErrWriteAlone", err)
	}
}

// writeWithin is b.Write(e), or fails the test if it has not returned
// within d.
func writeWithin(b *Batcher, e *End, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- b.Write(e) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return errors.New("still waiting for the loop")
	}
}
