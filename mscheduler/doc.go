// Package mscheduler turns a MongoDB collection into a durable task queue
// run by any number of worker processes.
//
// A [Producer] publishes keyed tasks; a [Consumer] claims and runs them. One
// document per task holds its parameters, options, counters, the runs in
// progress (under holders) and the most recent finished runs (under runs),
// so the collection can be read as it is in Compass or mongosh.
//
// # Claiming and leases
//
// A worker claims a slot of a task with one atomic findOneAndUpdate whose
// filter holds every condition of eligibility: the task's time has come, it
// has a free slot, the worker is allowed (worker ids, group) and does not
// already hold a run of it. The claim returns the task, and the handler
// runs. While it runs, the worker pings the run every ping interval, moving
// its lease_until forward by the task's worker timeout. Every write about a
// run is fenced on the task key, the run id and the worker id: a ping or an
// end that matches nothing means the run was taken away, and the worker
// cancels the handler and writes nothing more about it.
//
// A run whose lease lapsed is dead: any worker's sweep records it as
// expired and frees its slot, which another worker then claims. Times are
// server times: each worker estimates its offset from the server's clock
// (from the hello command's localTime), so skewed clocks neither run a task
// twice nor stall it.
//
// # Recurring tasks
//
// A task with a [Plan] runs at each of its planned times: once, every N
// units, weekly, monthly, or at the times of a cron expression, in an IANA
// zone, within an optional window, a number of times or forever. The run end
// that completes an occurrence moves the task to its next planned time in
// the same fenced update, so no planned time is scheduled or run twice.
// Missed planned times follow the plan's [MissedPolicy], and ones that come
// during a run its [OverrunPolicy]. [Plan.Next] is the computation, as a
// pure function.
//
// # Guarantees
//
// Execution is at least once: a run that ended without its end being
// written (a crash, a lost network) is run again after its lease lapses. At
// most Concurrency runs of a task go on at once while their leases are
// valid; a worker whose pings fail until its lease lapses cancels its
// handler. Writes use majority write concern by default, so an
// acknowledged write survives a replica-set failover.
//
// # Discovery
//
// Workers learn about new tasks from a change stream where the server has
// one (a replica set), and otherwise by polling with jitter. They also keep
// the time of the next future task, so they wake when it becomes due.
//
// # Servers
//
// Every query uses plain operators (no $expr, no aggregation updates, no
// transactions), served by the indexes [EnsureIndexes] creates on MongoDB 5.0
// or later. The same queries run on the development server shipped under
// testdata/devserver (FerretDB), whose change streams are emulated.
package mscheduler
