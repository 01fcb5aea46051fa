package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBudgetAllowsBurstThenMinRate(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	b := NewBudget(c.now)
	for i := range int(Burst) {
		if ok, _ := b.Take(); !ok {
			t.Fatalf("retry %d refused within the burst", i)
		}
	}
	ok, wait := b.Take()
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("after the burst: allowed %v, wait %v; want refused, about 1/MinRate s", ok, wait)
	}
	_, second := b.Take()
	if second <= wait {
		t.Fatalf("a second retry in debt waits %v, the first %v: want longer", second, wait)
	}
	c.t = c.t.Add(second)
	for range 10 {
		b.Succeeded()
	}
	if ok, _ := b.Take(); !ok {
		t.Fatal("refused after the debt was repaid and ten successes earned one retry")
	}
	if granted, waited := b.Counts(); granted != int64(Burst)+3 || waited != 2 {
		t.Fatalf("granted %d, waited %d", granted, waited)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	b := NewBudget(c.now)
	b.tokens = -5
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); err == nil {
		t.Fatal("Wait on an empty budget and a done context returned nil")
	}
	if _, waited := b.Counts(); waited != 1 {
		t.Fatalf("waited %d, want 1", waited)
	}
}

func TestBackoffGrowsWithJitterAndLimit(t *testing.T) {
	base, limit := 100*time.Millisecond, time.Second
	for try := 1; try <= 8; try++ {
		want := min(base<<(try-1), limit)
		for range 50 {
			if d := Backoff(base, limit, try); d < want/2 || d > want {
				t.Fatalf("try %d: %v, want within [%v, %v]", try, d, want/2, want)
			}
		}
	}
}

func TestBoundedHasNoDeadlineAndEnds(t *testing.T) {
	cause := errors.New("bound")
	ctx, cancel := Bounded(context.Background(), 10*time.Millisecond, cause)
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a bounded context shows a deadline to the driver")
	}
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

func TestUntilAllDoneWaitsForTheLast(t *testing.T) {
	a, cancelA := context.WithCancel(context.Background())
	b, cancelB := context.WithCancel(context.Background())
	ctx, cancel := UntilAllDone(context.Background(), []context.Context{a, b}, errors.New("all gone"))
	defer cancel()
	cancelA()
	select {
	case <-ctx.Done():
		t.Fatal("done while one run still holds its lease")
	case <-time.After(20 * time.Millisecond):
	}
	cancelB()
	<-ctx.Done()
}
