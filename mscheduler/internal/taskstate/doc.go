// Package taskstate is the one owner of a task's state. It alone builds
// every change of a task's status and of the fields bound to it (holders,
// running, free, succeeded, failed_runs, next_expiry, expire_at, the plan
// state, the invalid note, the history marks): the claim, the ping, the
// run end (alone and batched), the sweep's expiry and repair, the plan's
// advance and gate, every producer action, the quarantine, the periodic
// check's repairs and the retention deletes ask it for their filter and
// update, and send what it returns. No other package writes an update
// document for a task collection (a test reads the source to hold that).
//
// Each change is a named transition whose filter holds the states it
// applies to (its guard) and whose update keeps every invariant below.
// The fields bound to the status are written by one function (settle),
// which every transition that sets a status or frees the last run calls.
//
// # Invariants
//
// On every task document the library wrote (Check verifies them; tests
// call it after every write):
//
//   - readable: the document passes stored.DecodeTask: a string _id that
//     the key field, when present, equals; a known status; fields of
//     their types; the counters and options a claim needs.
//   - holders: running is the number of holders, each with a run id and a
//     lease no earlier than its start.
//   - status: a pending task has no run going and a free slot; a running
//     task has a run going; a succeeded or finished task has none.
//   - free: free = concurrency - running - succeeded, in every status.
//   - counters: running, succeeded and failed_runs are never negative.
//   - expire_at: present exactly when the task is finished for good (a
//     final status and no run going) and its retention is not forever.
//     Retention deletes only such tasks, checking the status again.
//   - invalid: the invalid note is present exactly on an invalid task.
//   - next_expiry: present exactly when a run holds the task, and no
//     later than any holder's lease_until, so that one indexed range
//     query finds every lease that may have lapsed.
//
// Every write that follows a read is fenced on the _id as read (a raw
// value, never a decoded copy of another field), and a write about a run
// on the run id and worker as well: a write that matches nothing changed
// nothing, and its writer learns that the task moved.
package taskstate
