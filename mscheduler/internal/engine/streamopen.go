package engine

import (
	"context"
	"fmt"
)

// openStream opens the change stream unless Discovery says poll, and
// joins the database's shared poll (see dbpoll.go) when it does not. With
// DiscoveryAuto, a server without change streams (a standalone server, the
// development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set) means
// polling; with DiscoveryChangeStream it is an error.
// The stream is the database's, shared by the consumers of the process
// (see watch.Stream).
func (c *Engine) openStream(ctx context.Context) error {
	if c.cfg.Discovery == DiscoveryPoll {
		c.poll.Open()
		return nil
	}
	if err := c.stream.Open(ctx); err != nil {
		if c.cfg.Discovery == DiscoveryChangeStream {
			return fmt.Errorf("mscheduler: open change stream (Discovery is change_stream): %w", err)
		}
		c.log.Info("no change streams on this server; polling", "poll_interval", c.cfg.PollInterval.String(), "reason", err)
		c.poll.Open()
	}
	return nil
}
