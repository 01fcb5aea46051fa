package engine

import (
	"context"
	"sync"
)

// claimPasses tells ClaimNow when the claim loop has looked: a pass is a
// look for claimable tasks (claims made or not), or one given up on for
// want of the server's clock; a pass that waits to gather free slots for
// one claim is no look, its look comes when the gathering ends. The claim loop writes it; ClaimNow reads it.
type claimPasses struct {
	mu     sync.Mutex
	done   uint64        // passes ended
	inPass bool          // a pass is going on
	ended  chan struct{} // closed, and replaced, as each pass ends
}

func newClaimPasses() *claimPasses { return &claimPasses{ended: make(chan struct{})} }

func (p *claimPasses) begin() {
	p.mu.Lock()
	p.inPass = true
	p.mu.Unlock()
}

func (p *claimPasses) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.inPass = false
	close(p.ended)
	p.ended = make(chan struct{})
}

// after is the count of passes ended once a pass that begins after now
// has ended: a pass going on now may have read the demand before it rose.
func (p *claimPasses) after() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inPass {
		return p.done + 2
	}
	return p.done + 1
}

// wait returns once n passes have ended, or ctx is done.
func (p *claimPasses) wait(ctx context.Context, n uint64) error {
	for {
		p.mu.Lock()
		done, ended := p.done, p.ended
		p.mu.Unlock()
		if done >= n {
			return nil
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// idle returns once no pass is going on, at once if none is, or when ctx
// is done.
func (p *claimPasses) idle(ctx context.Context) error {
	for {
		p.mu.Lock()
		going, ended := p.inPass, p.ended
		p.mu.Unlock()
		if !going {
			return nil
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// LookEnded returns once the claim loop is not looking for claimable
// tasks (at once if it is not), or ctx is done: the claims of the look
// going on are made, and their runs announced. A pull front end whose
// taker has some runs waits for it, so that runs claimed for the taker
// in that look go out in its answer rather than to no one.
func (c *Engine) LookEnded(ctx context.Context) error { return c.passes.idle(ctx) }

// ClaimNow wakes the claim loop and returns once a pass that began after
// the call has ended, or ctx is done: what was claimable when it was
// called, within the demand (ClaimDemand) and the free slots, has been
// claimed, and its runs announced (EventClaimed). A pull front end calls
// it for a take that will not wait: without it, such a take saw only the
// runs claimed before it came.
func (c *Engine) ClaimNow(ctx context.Context) error {
	n := c.passes.after()
	c.wake()
	return c.passes.wait(ctx, n)
}
