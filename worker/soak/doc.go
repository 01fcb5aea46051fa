// Package soak holds crash-and-restart soak tests of mscheduler and its
// worker runtime. It has no API; its code is its tests, TestSoak,
// TestVandalSoak, TestCrashTrial and TestGatewaySoak (below), and the
// history checker they share, package histcheck:
//
//	go test -race ./worker/soak -run 'TestSoak$' -v           # short form: 150 tasks, 1.5-2.5 minutes
//	go test -race ./worker/soak -run 'TestSoak$' -v -soak.long   # long form: 1,000 tasks, about 5 minutes
//	go test -race ./worker/soak -run TestVandalSoak -v        # 102 tasks and a vandal, 1-1.5 minutes
//	go test -race ./worker/soak -run TestGatewaySoak -v       # 120 tasks, executors over HTTP, about 40 s
//	go test -race ./worker/soak -run TestCrashTrial -v        # 100 tasks and 12 plans, 1.5 s leases, about 2 minutes
//	go test -race ./worker/soak -run TestCrashTrial -v -soak.trial -timeout 30m   # 400 tasks, kills for 220 s, about 7 minutes
//
// TestGatewaySoak runs the crash soak through the HTTP gateway: three
// executor processes (the test binary run again) take runs over HTTP, renew
// and end them, and are SIGKILLed every 2-4 s and restarted at once under
// the same executor id with a new session, so that the runs they held come
// back to them. It checks the same history (no overlap beyond concurrency
// while leases are valid, nothing lost, one record per run end), that every
// run going at a kill came back to the restarted executor, and that no
// lease lapsed under a live one. Each executor is a worker: runs are held
// and recorded under the executor's id, tasks of concurrency 2 and 3 run
// on as many executors at once, and the distinct-workers ones succeed on
// as many executors as their concurrency.
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
//     until then when it never logged an end (its worker was killed); one
//     recorded released that never logged an end is cut at its finish. A
//     run cut at its lease may overlap the next by up to 100 ms, the error
//     of the workers' estimates of the server clock (package histcheck);
//  5. nothing is lost or stuck: no task holds a run or counts one as running,
//     free == concurrency - running - succeeded, every run in the handler
//     logs is recorded, a run that never logged its end is recorded expired
//     or released, and a run recorded succeeded or failed is one whose
//     handler logged that outcome last;
//  6. the run history collection holds every run the tasks recorded, once,
//     with the same outcome and key, and nothing else (package histcheck;
//     before stopping the workers, the soak waits until no task marks a
//     run whose history record is not written yet: those of killed workers
//     are written by the maintenance lease holder).
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
// # TestCrashTrial
//
// TestCrashTrial runs the same server and worker pool at the settings a
// user's crash trial once stalled on: 4 workers of Capacity 4, polling
// every 500 ms and sweeping every second; tasks of concurrency 1 to 3 (a
// third each quick, slow 1-3 s, and failing their first attempt),
// pinged every 300 ms and leased 1.5 s; and 12 plans (every second, 8-10
// planned times; every missed-run policy, overruns as missed or queued,
// concurrency 1 and 2). A worker is SIGKILLed every 2 s, and the server
// killed once half way; then the kills stop and every task must be final
// within finishIn. Beside TestSoak's checks 1-6 (for concurrency above 1,
// a planned time succeeds as often as the concurrency), it fails on a run
// done twice by a worker never killed: a handler that logged its success
// last while its run was not recorded succeeded (but one that ended while
// the server was down), and, in the full form, on a median above 2 s
// from a kill to the record of each of the killed worker's runs expired.
// It reports the leases lost by live workers, and how many came within 5 s
// of the worker's start. The short form (100 tasks and the plans, kills
// for 60 s, 120 s to finish) runs in the suite; -soak.trial runs the full
// one (400 tasks and the plans, kills for 220 s, 180 s to finish).
//
// # TestVandalSoak
//
// TestVandalSoak runs the same server, worker pool (with CheckInterval 1 s,
// so that the check for documents no claim can match runs within the test),
// kills and loop over a smaller mix (102 tasks due over 30 s; no server
// restart: the faults are the kills and the vandal), while a vandal edits
// random fields of random documents by hand, as a person in mongosh or
// Compass might, every 250-500 ms (its own generator, seeded from the
// logged seed) until 6 s before the kills stop, so that workers start after
// its last edit:
//
//   - tasks (half of the edits): status set to each real value (pending,
//     running, succeeded, failed, finished, cancelled, invalid) and to
//     "done", "", 0 or removed (each of them at least once: in the last
//     10 s, every task edit sets one not set yet); a field of another type (a string for a
//     number, a number for a string, a string for a date), an array or a
//     document where a scalar goes (a string where an array or document
//     goes), a field removed, group set to [{x: 1}]; a copy inserted
//     without _id (an ObjectId clone) or under a new string _id with the old
//     key; and, in the last 15 s only, a 1 MB string and a 10,000-element
//     array in two documents (each slows every command of the development
//     server by 25-30 ms);
//   - history records in <coll>.runs: a field of another type, or removed;
//   - <coll>.meta: the maintenance lease's lease_until a string or
//     removed, or its content replaced by {junk: 1}; the schema document's
//     version "2"; the consumers document's seen "x";
//   - the soak's worker records in mscheduler.workers: heartbeat_ms 1e18,
//     a field of another type, a field removed.
//
// It never sets paused and deletes nothing. Every edit is recorded with the
// task it touched (a clone touches the task it copies, a history record the
// task it names) and written to vandal.log in the log directory (and to the
// test log when the test fails). While it runs, the test fails on:
//
//   - a lapsed lease still held: a task keeping a holder whose lease_until
//     is older than the lease (2.5 s) + the SweepInterval + 15 s on two
//     polls in a row (the slack covers a sweep every 2.4 s at most among
//     four workers, a next_expiry the vandal broke, found by the check of a
//     maintenance lease holder that may have just been killed, and the
//     development server's queue, with other tests beside; the longest
//     seen, under 9 s so far, is reported);
//   - an error of the readers' API, each kind called every 3 s:
//     Producer.List through every page by its After cursor (and every task
//     there before the first page listed: nothing is deleted, and _ids do
//     not change), Producer.Runs through every page,
//     mscheduler.ListWorkers, the dashboard's pages for the collection
//     (overview, tasks, invalid and running tasks, workers, schedules, a
//     touched task, a clone, an untouched task: each must answer 200), and
//     the operator command's list, history and workers (built once into a
//     temporary directory);
//   - a worker that exits on its own or does not become ready.
//
// Once every task is final or invalid with no run going (within 4 minutes of the
// first publish) and the untouched tasks' history is written, it checks:
//
//   - the tasks the vandal never touched: TestSoak's checks 1-6 on them,
//     their handler runs and their history records (but those the vandal
//     edited);
//   - the touched tasks and the clones: each ends succeeded, failed,
//     finished, cancelled, or invalid with invalid.field set; with no
//     holder, and running 0 unless it is invalid (holders edited into an
//     array leave a count no holder backs);
//   - the metadata: within 30 s, the maintenance lease has a string holder
//     and a date lease_until, the schema version is a number, the consumers
//     document's seen is a document;
//   - the workers' WARN and ERROR log lines (their JSON lines, and the
//     default logger's text lines): at most 600 in any minute. 30-70 are
//     seen; the vandal's edits could explain about 500 at most (a line or
//     two for each of up to 240 edits a minute, and the handlers' failures);
//     a loop that fails over and over logs thousands.
//
// Flags (after the package path):
//
//	-soak.long         the long form of TestSoak
//	-soak.trial        the full form of TestCrashTrial
//	-soak.seed N       seed of the task mix, the faults and the vandal (default: from the clock)
//	-soak.dir DIR      keep the server data, handler logs and worker logs in DIR
//	                   (TestVandalSoak: in DIR/vandal, with vandal.log)
//	-soak.sweep D      the workers' SweepInterval (default 1s; see below)
//
// The workers' SweepInterval defaults to 1 s rather than 300 ms: a consumer
// claims nothing in a pass of its claim loop that starts after its next
// sweep is due, and on the saturated development server a sweep often takes
// longer than 300 ms, so that with 300 ms the workers mostly sweep and the
// soak takes several times longer. Pass -soak.sweep=300ms to see it.
package soak
