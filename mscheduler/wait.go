package mscheduler

import (
	"context"
	"slices"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler/internal/localwake"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Waiting for tasks to end: the producers and consumers that share a client
// say at once when a run ends or a write of theirs ends a task; a change
// stream, where the server has one, says it for the other processes;
// otherwise Wait polls, with backoff.

// Bounds of Wait's polling.
const (
	waitPollFirst = 100 * time.Millisecond
	waitPollMax   = 2 * time.Second
	// waitPollStream is the safety poll while a change stream is open.
	waitPollStream = 15 * time.Second
)

// done reports a status in which a task runs no more until a person acts.
func done(s Status) bool { return isFinal(s) || s == StatusInvalid }

// settled says a task runs no more until a person acts and its runs have
// ended: a task cancelled while it ran is final at once, but its run is
// recorded when its worker has stopped the handler. A run whose lease
// lapsed at now (its worker gone) is not waited for: a sweep records it
// later, as expired.
func settled[P any](info *TaskInfo[P], now time.Time) bool {
	if !done(info.Status) {
		return false
	}
	going := func(h HolderInfo) bool { return h.LeaseUntil.After(now) }
	return info.Status == StatusInvalid || !slices.ContainsFunc(info.Holders, going)
}

// Wait blocks until the task reaches a final status (succeeded, failed,
// finished, cancelled) with no run going, or is set invalid, and returns it
// as Get does: its last run is [TaskInfo.LastRun], with its result or
// error. A task cancelled while it ran is returned once its worker has
// recorded the run (outcome cancelled), or once the run's lease has
// lapsed if its worker is gone. ctx bounds the wait. It returns
// [ErrNotFound] if no task has the key (or it is deleted while waited
// for).
func (p *Producer[P]) Wait(ctx context.Context, key string) (*TaskInfo[P], error) {
	ended := make(chan string, 16)
	defer localwake.AddWaiter(p.coll, &localwake.Waiter{Ended: ended})()
	changed, stop := p.watchKey(ctx, key)
	defer stop()
	delay := waitPollFirst
	if changed != nil {
		delay = waitPollStream
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		info, err := p.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if settled(info, time.Now()) {
			return info, nil
		}
		timer.Reset(delay)
		for woken := false; !woken; {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case k := <-ended:
				woken = k == key
			case <-changed:
				woken = true
			case <-timer.C:
				woken = true
				if changed == nil {
					delay = min(2*delay, waitPollMax)
				}
			}
		}
	}
}

// watchKey opens a change stream of the task's changes, if the server has
// them: each change is signalled on the channel (nil without a stream).
// stop closes the stream and waits for its reader.
func (p *Producer[P]) watchKey(ctx context.Context, key string) (<-chan struct{}, func()) {
	match := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "documentKey._id", Value: key}}}}}
	return p.watch(ctx, match, func(bson.Raw) bool { return true })
}

// watch runs a change stream with pipeline until stop, signalling the
// events keep accepts; it returns a nil channel on a server without
// change streams.
func (p *Producer[P]) watch(ctx context.Context, pipeline mongo.Pipeline, keep func(bson.Raw) bool) (<-chan struct{}, func()) {
	wctx, cancel := context.WithCancel(ctx)
	cs, err := p.coll.Watch(wctx, pipeline)
	if err != nil {
		cancel()
		return nil, func() {}
	}
	signal := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cs.Close(context.Background())
		for cs.Next(wctx) {
			if keep(cs.Current) {
				select {
				case signal <- struct{}{}:
				default:
				}
			}
		}
	}()
	return signal, func() { cancel(); <-done }
}

// Completion says that a task reached a final status.
type Completion struct {
	Key    string
	Status Status
}

// Completions delivers, until ctx is done, the tasks of the collection
// that reach a final status (succeeded, failed, finished, cancelled) or are
// set invalid: at once when this process ends them (a run end, or a write
// of a producer or consumer sharing the producer's client: a cancel, a
// plan finished at its claim or on resume, a task set invalid), and from
// other processes through a change stream where the server has one. It is
// best effort: the channel holds buffer completions and what does not fit
// is dropped; a completion may come twice (from both sources, or for a
// task cancelled while it ran: at the cancel and at the run's end);
// without a change stream, tasks that other processes end are not
// reported. A deleted task is not a completion: it has no status left.
// The channel is closed when ctx is done.
func (p *Producer[P]) Completions(ctx context.Context, buffer int) <-chan Completion {
	out := make(chan Completion, max(buffer, 1))
	ended := make(chan string, max(buffer, 16))
	remove := localwake.AddWaiter(p.coll, &localwake.Waiter{Ended: ended})
	finals := bson.A{}
	for _, s := range append(finalStatuses[:len(finalStatuses):len(finalStatuses)], StatusInvalid) {
		finals = append(finals, s)
	}
	pipeline := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "updateDescription.updatedFields." + fStatus, Value: op("$in", finals)}}}}}
	streamed := make(chan Completion, max(buffer, 16))
	changed, stop := p.watch(ctx, pipeline, func(ev bson.Raw) bool {
		key, _ := ev.Lookup("documentKey", fID).StringValueOK()
		status, _ := ev.Lookup("updateDescription", "updatedFields", fStatus).StringValueOK()
		select {
		case streamed <- Completion{Key: key, Status: Status(status)}:
		default:
		}
		return true
	})
	_ = changed
	send := func(c Completion) {
		select {
		case out <- c:
		default: // best effort: the reader is behind
		}
	}
	go func() {
		defer close(out)
		defer stop()
		defer remove()
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-streamed:
				send(c)
			case key := <-ended:
				if status, ok := p.statusOf(ctx, key); ok && done(status) {
					send(Completion{Key: key, Status: status})
				}
			}
		}
	}()
	return out
}

// statusOf reads a task's status; a status that is not a string (edited
// by hand) reads as the empty status, which no wait is done at.
func (p *Producer[P]) statusOf(ctx context.Context, key string) (Status, bool) {
	raw, err := p.coll.FindOne(ctx, bson.D{{Key: fID, Value: key}}, options.FindOne().SetProjection(bson.D{{Key: fStatus, Value: 1}})).Raw()
	if err != nil {
		return "", false
	}
	status, _ := raw.Lookup(fStatus).StringValueOK()
	return Status(status), true
}
