package taskstate

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// AllLogged selects tasks whose every ended run has its history record:
// deletes keep the others until their records are written.
var AllLogged = bson.E{Key: stored.FUnlogged, Value: Op("$not", Op("$gt", bson.D{}))}

// Expired selects the tasks whose retention ended by now: finished for
// good (a final status, no run going) and every history record written.
// The status is checked again, not only expire_at: a task a person set
// back to pending by hand keeps the expire_at it had until the periodic
// check removes it, and must not be deleted meanwhile.
func Expired(now time.Time) bson.D {
	return bson.D{
		{Key: stored.FExpireAt, Value: Op("$lte", now)},
		{Key: stored.FStatus, Value: Op("$in", FinalStatuses)},
		{Key: stored.FRunning, Value: 0},
		AllLogged,
	}
}

// ExpiredRecords selects the history records whose retention ended by now.
func ExpiredRecords(now time.Time) bson.D {
	return bson.D{{Key: stored.FExpireAt, Value: Op("$lte", now)}}
}

// FinishedBefore selects the tasks finished for good whose last change was
// before t, every history record written.
func FinishedBefore(t time.Time) bson.D {
	return bson.D{
		{Key: stored.FStatus, Value: Op("$in", FinalStatuses)},
		{Key: stored.FRunning, Value: 0},
		{Key: stored.FUpdatedAt, Value: Op("$lt", t)},
		AllLogged,
	}
}
