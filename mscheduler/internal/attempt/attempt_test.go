package attempt

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

var errTimeout = errors.New("timed out")

// abandon returns an Abandon whose reports go to channels.
func abandon(grace time.Duration) (*Abandon, chan error, chan struct{}) {
	gaveUp, late := make(chan error, 1), make(chan struct{}, 1)
	return &Abandon{Grace: grace, Timeout: errTimeout, Count: new(atomic.Int64),
		Abandoned: func(err error) { gaveUp <- err }, ReturnedLate: func() { late <- struct{}{} }}, gaveUp, late
}

func TestCallReturnsWhatTheHandlerReturns(t *testing.T) {
	a, _, _ := abandon(time.Minute)
	boom := errors.New("boom")
	got, err, gaveUp := Call(context.Background(), time.Minute, a, func(context.Context) (int, error) { return 7, boom })
	if got != 7 || err != boom || gaveUp {
		t.Fatalf("Call = %d, %v, %v; want 7, boom, false", got, err, gaveUp)
	}
}

func TestDeadlineFailsTheAttemptWhateverTheHandlerReturnsAfter(t *testing.T) {
	a, _, _ := abandon(time.Minute)
	got, err, gaveUp := Call(context.Background(), 10*time.Millisecond, a, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 7, nil // success, too late
	})
	var te *TimeoutError
	if got != 0 || !errors.Is(err, errTimeout) || !errors.As(err, &te) || te.After != 10*time.Millisecond || gaveUp {
		t.Fatalf("Call = %d, %v, %v; want 0, a timeout after 10ms, false", got, err, gaveUp)
	}
}

func TestCallersCancellationIsNotATimeout(t *testing.T) {
	a, _, _ := abandon(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err, _ := Call(ctx, time.Minute, a, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, errTimeout) {
		t.Fatalf("err = %v, want the handler's context.Canceled", err)
	}
}

func TestHandlerIgnoringItsContextIsAbandonedAndCountedUntilItReturns(t *testing.T) {
	a, gaveUpCh, late := abandon(20 * time.Millisecond)
	release := make(chan struct{})
	got, err, gaveUp := Call(context.Background(), 10*time.Millisecond, a, func(context.Context) (int, error) {
		<-release // ignores its context
		return 7, nil
	})
	if got != 0 || !gaveUp || !errors.Is(err, errTimeout) || <-gaveUpCh != err {
		t.Fatalf("Call = %d, %v, %v; want 0, the reported timeout, true", got, err, gaveUp)
	}
	if n := a.Count.Load(); n != 1 {
		t.Fatalf("Count = %d while the handler runs, want 1", n)
	}
	close(release)
	<-late
	if n := a.Count.Load(); n != 0 {
		t.Fatalf("Count = %d after it returned, want 0", n)
	}
}
