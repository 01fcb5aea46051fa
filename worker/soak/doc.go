// Package soak holds a crash-and-restart soak test of mscheduler and its
// worker runtime. It has no API; its code is its test, TestSoak:
//
//	go test -race ./worker/soak -run TestSoak -v              # short form: 150 tasks, 1.5-2.5 minutes
//	go test -race ./worker/soak -run TestSoak -v -soak.long   # long form: 1,000 tasks, about 5 minutes
//
// The soak starts its own development server (worker/devserver) in a
// temporary directory on a fixed free port, unless MONGODB_URI names a
// server: then it uses that one and skips the server restart. It publishes
// tasks of every kind into one collection: quick ones (10-50 ms); slow ones
// (1-3 s, pinged every 250 ms, leased for 2.5 s); ones that fail their first
// attempt and succeed on a local retry; ones that always fail (they must end
// failed after MaxFailedRuns); ones with Concurrency 2, half of them with
// DistinctWorkers; and recurring ones (every second, 8-10 planned times,
// priority 1 so that the backlog does not hold back their planned times).
// Tasks expected to succeed allow 20 failed runs, as every worker kill and
// the server outage count against them. Due times are spread over a window, so that the faults
// hit a working system.
//
// Four worker processes claim them. Each is the test binary run again,
// running a worker.Worker with one consumer (Capacity 6, PollInterval 100 ms,
// RunsKept 200) under a worker id of its own per incarnation. One of the four
// slots always runs with its clock 30 s fast (ConsumerConfig.Clock). Every
// 2-4 s (randomized from a seed that is logged), the soak SIGKILLs a random
// worker and starts a new one in its slot. Once, about mid-run, it kills the
// development server, keeps it down for 3 s (longer than the 2.5 s leases), and
// starts it again on the same data directory and address. Workers exit when
// their standard input closes, so a dying test leaves none behind; the server
// dies with the test too (Pdeathsig).
//
// Each handler call appends one line to a log file of its worker
// incarnation, outside the database, with a single write:
//
//	start KEY RUN WORKER PLANNED_UNIX_MS_OR_0 UNIX_NANO
//	end KEY RUN WORKER OUTCOME UNIX_NANO
//
// The soak polls the collection every 500 ms until every task is final. Then
// it waits for the run history to be complete, stops the workers with
// SIGTERM and checks the task documents, the run history and the handler
// logs:
//
//  1. every task is in its expected final state: succeeded, failed for the
//     always-failing ones, finished with plan.runs + plan.skipped == Repeat
//     for the recurring ones (Repeat counts planned times, run or skipped);
//  2. each task's succeeded counter and its succeeded run records both equal
//     its concurrency (plan.runs × concurrency records for a plan), with
//     distinct workers where asked and done_by to match; always-failing tasks
//     have exactly MaxFailedRuns failed or expired runs; a retried run
//     succeeded on its second attempt;
//  3. no planned time of a recurring task succeeded twice, by the run
//     records and by the handler logs (a handler success whose run end was
//     lost, so that the run expired, is counted as run again, not as twice);
//  4. no more runs of a task overlapped than its concurrency while their
//     leases were valid, and no worker ran two runs of one task at once:
//     a run lasts from its first start line to its last end line, is cut at
//     the lease_until of its record when it was recorded expired, and lasts
//     until then when it never logged an end (its worker was killed). A run
//     cut at its lease may overlap the next by up to 100 ms, the error of
//     the workers' estimates of the server clock;
//  5. nothing is lost or stuck: no task holds a run or counts one as running,
//     free == concurrency - running - succeeded, every run in the handler
//     logs is recorded, a run that never logged its end is recorded expired
//     or released, and a run recorded succeeded or failed is one whose
//     handler logged that outcome last;
//  6. the run history collection holds every run the tasks recorded, once,
//     with the same outcome, and nothing else (before stopping the workers,
//     the soak waits until no task marks a run whose history record is
//     not written yet: those of killed workers are written by the
//     maintenance lease holder).
//
// It ends with a summary: tasks by final state, runs by outcome, kills,
// server restarts, duration and seed, and how far expired runs' handlers went
// on past their leases.
//
// The development server scans the collection for every command that does
// not select by _id alone (pings and run ends included), at a few tenths of a
// millisecond per document, one command at a time. So the short form keeps
// the collection to 150 tasks, and the long form publishes its 1,000 tasks in
// waves of 100: once a task is final and holds no run (from then on nothing
// writes to it), the soak keeps a snapshot of it for the checks and deletes
// it, and it publishes the next wave once no more than a wave of unfinished
// tasks is left.
//
// Flags (after the package path):
//
//	-soak.long         the long form
//	-soak.seed N       seed of the task mix and the faults (default: from the clock)
//	-soak.dir DIR      keep the server data, handler logs and worker logs in DIR
//	-soak.sweep D      the workers' SweepInterval (default 1s; see below)
//
// The workers' SweepInterval defaults to 1 s rather than 300 ms: a consumer
// claims nothing in a pass of its claim loop that starts after its next
// sweep is due, and on the saturated development server a sweep often takes
// longer than 300 ms, so that with 300 ms the workers mostly sweep and the
// soak takes several times longer. Pass -soak.sweep=300ms to see it.
package soak
