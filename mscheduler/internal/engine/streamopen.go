package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// openStream opens the change stream unless Discovery says poll. With
// DiscoveryAuto, a server without change streams (a standalone server, the
// development server with MSCHEDULER_DEV_NO_CHANGE_STREAMS set) means
// polling; with DiscoveryChangeStream it is an error.
func (c *Engine) openStream(ctx context.Context) (*mongo.ChangeStream, error) {
	if c.cfg.Discovery == DiscoveryPoll {
		return nil, nil
	}
	cs, err := c.stream.Open(ctx)
	if err != nil {
		if c.cfg.Discovery == DiscoveryChangeStream {
			return nil, fmt.Errorf("mscheduler: open change stream (Discovery is change_stream): %w", err)
		}
		c.log.Info("no change streams on this server; polling", "poll_interval", c.cfg.PollInterval.String(), "reason", err)
		return nil, nil
	}
	return cs, nil
}
