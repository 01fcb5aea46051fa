package mscheduler

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// Every filter uses plain query operators only (no $expr), so that MongoDB
// serves it from an index and the development server runs it too. The
// filters of the transitions of a task's state are taskstate's.

func op(name string, v any) bson.D { return taskstate.Op(name, v) }

// claimableStatuses are the statuses of tasks that may have a free slot.
var claimableStatuses = taskstate.ClaimableStatuses

// claimSort is the claim order: higher priority first, then earlier run_at.
var claimSort = taskstate.ClaimSort
