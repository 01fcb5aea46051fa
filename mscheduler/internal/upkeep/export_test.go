package upkeep

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Skip and Filters open SweepSkips to the package's external tests.
func (l *SweepSkips) Skip(raw bson.Raw, until time.Time) { l.add(raw, until) }
func (l *SweepSkips) Filters(now time.Time) bson.A       { return l.filters(now) }

// Overdue opens overdue to the package's external tests.
func Overdue(raw bson.Raw, now time.Time) bool { return overdue(raw, now) }
