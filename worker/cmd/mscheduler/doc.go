// Command mscheduler shows and edits the tasks of one task collection.
//
// Usage:
//
//	mscheduler [global flags] <command> [flags] [arguments]
//
// Commands:
//
//	list [--tag T]... [--status S]... [--group G] [--from T] [--before T]
//	     [--sort key|run_at|priority] [--limit N] [--after KEY] [--json]
//	                    list tasks, by key or by --sort; every --tag must match,
//	                    any --status may; --from and --before bound run_at
//	show KEY [--json]   show one task: options, counters, plan, params
//	update KEY [flags]  change the options and metadata of a task (see update -h)
//	pause KEY           stop new runs of a task; runs going on finish
//	resume KEY          let a paused task run again
//	skip KEY N          skip the next N planned times of a task's plan (0 cancels)
//	migrate             bring the collection to this build's schema version and
//	                    create its indexes, as a worker's start-up does
//	help                print this help
//
// Global flags, accepted before or after the command:
//
//	-c, --collection NAME   the task collection (required)
//	--db NAME               the database; default $MSCHEDULER_DB, else "mscheduler"
//	--uri URI               the connection string; default $MONGODB_URI
//	--connect-timeout D     how long to look for the server; default 5s
//
// The command never starts a development server: without --uri or
// MONGODB_URI it stops with an error.
//
// Flags of update are applied only when given, so "--priority 0" sets the
// priority to zero and leaving the flag out leaves it alone. --tags and
// --worker-ids take comma-separated lists; an empty string clears them.
// Invalid values are refused by the library, naming the field, and nothing
// is written.
//
// With --json, list prints an array and show an object, with the field names
// of the task document (snake_case); params are printed as relaxed extended
// JSON. Times are UTC.
//
// Exit status: 0 on success, 1 when the operation failed (no such task, an
// invalid value, the server could not be reached), 2 for a usage error (an
// unknown command or flag, a missing argument). Errors are one line on
// stderr, prefixed "mscheduler: ".
//
// Example:
//
//	export MONGODB_URI=mongodb://localhost:27017/?replicaSet=rs0
//	mscheduler -c emails list --tag welcome --status pending
//	mscheduler -c emails update welcome-42 --priority 5 --tags welcome,vip
//	mscheduler -c reports skip monthly-report 1
package main
