// Command mscheduler shows and steers the tasks of one task collection,
// serves it from the command line, and runs the dashboard and the
// development server.
//
// Usage:
//
//	mscheduler [global flags] <command> [flags] [arguments]
//
// "mscheduler help" lists the commands and "mscheduler help <command>" the
// flags of one. In short:
//
//	list, show, history, stats, workers, wait   read tasks, runs and workers
//	publish, update, pause, resume, skip,       change tasks, through the same
//	cancel, retry, run-now, delete              library calls a program makes
//	params-schema                               the JSON Schema publishes must satisfy
//	migrate                                     schema version and indexes
//	work --exec CMD                             serve the collection: each run is sh -c CMD
//	dashboard                                   the web dashboard
//	dev                                         the development server, from a checkout
//	completion bash|zsh|fish                    the shell's completion script
//
// Global flags, accepted before or after the command:
//
//	-c, --collection NAME   the task collection (required by most commands)
//	--db NAME               the database; default $MSCHEDULER_DB, else "mscheduler"
//	--uri URI               the connection string; default $MONGODB_URI
//	--connect-timeout D     how long to look for the server; default 5s
//
// Without --uri or MONGODB_URI only dev, and dashboard (with demo tasks),
// start a development server; the others stop with an error. A collection
// must exist: a misspelt -c is an error, and publish --create or migrate
// --create makes a new one.
//
// Exit status: 0 on success; 2 for anything wrong on the command line (an
// unknown command or flag, a missing argument, a value a flag gave that is
// refused, naming the flag); 1 when the operation failed (no such task or
// collection, an action that does not apply, no server within
// --connect-timeout). Errors are one line on stderr, prefixed "mscheduler: ".
//
// Example:
//
//	export MONGODB_URI=mongodb://localhost:27017/?replicaSet=rs0
//	mscheduler -c emails list --tag welcome --status pending
//	mscheduler -c emails update welcome-42 --priority 5 --tags welcome,vip
//	mscheduler -c reports skip monthly-report 1
package main
