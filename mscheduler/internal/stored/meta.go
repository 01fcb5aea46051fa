package stored

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The metadata documents of a task collection, in <name>.meta.
const (
	// SchemaID is {_id: "schema", version, updated_at}: the layout version
	// of the collection's documents.
	SchemaID = "schema"
	// MaintenanceID is {_id: "maintenance", holder, lease_until}: the lease
	// of the worker that does the collection's maintenance.
	MaintenanceID = "maintenance"
	// ParamsSchemaID is {_id: "params_schema", json, updated_at}: the JSON
	// Schema, as JSON text, that the params of every task published into
	// the collection must satisfy.
	ParamsSchemaID = "params_schema"
)

// SchemaVersionOf reads the version of a schema document. ok is false
// when the document holds no whole number there (edited by hand): the
// caller then treats the collection as of the oldest version, which every
// migration step starts from safely.
func SchemaVersionOf(raw bson.Raw) (version int, prob *Problem) {
	v := raw.Lookup("version")
	n, ok := v.AsInt64OK()
	if !ok {
		if v.Type == 0 {
			return 0, Problemf("version", "is missing")
		}
		return 0, Problemf("version", "must be a whole number, got %s", DescribeValue(v))
	}
	return int(n), nil
}

// Lease is the maintenance lease.
type Lease struct {
	Holder     string    `bson:"holder"`
	LeaseUntil time.Time `bson:"lease_until"`
}

// LeaseOf reads the maintenance lease document: a holder that is a string
// and a lease_until that is a date, or the problem with it. A lease with a
// problem can never be taken by the lease's own filter, so it is replaced.
func LeaseOf(raw bson.Raw) (Lease, *Problem) {
	var l Lease
	h := raw.Lookup("holder")
	holder, ok := h.StringValueOK()
	if !ok {
		if h.Type == 0 {
			return l, Problemf("holder", "is missing")
		}
		return l, Problemf("holder", "must be a string, got %s", DescribeValue(h))
	}
	if p := DateProblem(raw, "lease_until"); p != nil {
		return l, p
	}
	l.Holder, l.LeaseUntil = holder, raw.Lookup("lease_until").Time()
	return l, nil
}

// Layout versions. Version 1 was the first layout; version 2 added plans,
// execution timeouts, paused tasks and revoked runs, which a version-1
// worker would misread (it would run a planned task once and finish it).
const (
	// SchemaVersion is the version of the task document layout this
	// library writes.
	SchemaVersion = 2
	// SchemaVersionOldest is the oldest layout this library migrates.
	SchemaVersionOldest = 1
)
