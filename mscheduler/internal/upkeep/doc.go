// Package upkeep is a worker's work beyond claiming and running: setting
// tasks that cannot be served as stored invalid (the quarantine), sweeping
// the runs whose lease lapsed, the periodic check of documents no claim
// can match, and the maintenance of a collection (retention deletes, the
// history records left unwritten) by the holder of its maintenance lease.
// Each writes a task only through the owner of a task's state
// (internal/taskstate) and reads it only through the gate
// (internal/stored); the consumer says when each is due.
package upkeep
