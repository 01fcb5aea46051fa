// Package worker is the runtime of a worker process: it connects to
// MongoDB, runs the process's consumers (one per task collection, each with
// its own handler and types), and shuts them down gracefully on SIGINT or
// SIGTERM.
//
// A worker process looks like this:
//
//	w, err := worker.New(ctx, worker.Config{}) // MONGODB_URI, database "mscheduler"
//	if err != nil {
//		log.Fatal(err)
//	}
//	err = worker.Register(w, "emails", sendEmail, &mscheduler.ConsumerConfig{Capacity: 20})
//	if err != nil {
//		log.Fatal(err)
//	}
//	if err := w.Run(ctx); err != nil { // until ctx is done or SIGINT/SIGTERM
//		log.Fatal(err)
//	}
//
// Register fills the worker id, groups and logger of each consumer from the
// worker's [Config] and counts the consumers' events ([Worker.Counts]),
// which Run logs when it stops. Run creates the collections' indexes
// (mscheduler.EnsureIndexes) before it starts the consumers, so a worker may
// start before any producer.
package worker
