package mscheduler

import "time"

// MaintenanceIntervalDefault is the default ConsumerConfig.MaintenanceInterval.
const MaintenanceIntervalDefault = time.Minute

// The maintenance of a collection (retention deletes where the server
// has no TTL index, history records left unwritten, the check) is done by
// the worker holding its maintenance lease (see internal/upkeep), from its
// upkeep loop (see internal/engine/upkeeploop.go).

// MaintenanceLeader reports whether this consumer held the collection's
// maintenance lease at its last try.
func (c *Consumer[P, R]) MaintenanceLeader() bool { return c.eng.MaintenanceLeader() }
