// Package dashboard is the web page of a task database: it shows, live,
// the tasks of every task collection with their runs and leases, the run
// history, the recurring tasks with their next planned times, and the
// worker processes with what they hold; and it acts on tasks (retry,
// cancel, run now, pause, resume, skip, delete) through the library's
// Producer, never by writing documents itself.
//
// A Dashboard is an http.Handler: mount it in a service under any prefix,
//
//	d, err := dashboard.New(client.Database("mscheduler"), &dashboard.Config{ReadOnly: true})
//	if err != nil {
//		log.Fatal(err)
//	}
//	mux.Handle("/jobs/", http.StripPrefix("/jobs", d))
//
// or serve it with "mscheduler dashboard". Its pages are server-rendered
// with html/template; the style sheet and the small script that keeps
// pages live are embedded, so it needs no build step and no network.
//
// Every query is bounded by Config.QueryTimeout (sent to the server as
// maxTimeMS) and by a page size. Actions are POSTs refused from other
// origins (net/http's CrossOriginProtection); Config.Token requires a
// token; Config.ReadOnly hides and refuses every action.
//
// Before any of that, every request is guarded: a Host the dashboard does
// not answer to (DNS rebinding) gets 421, and without a token a peer on
// another machine gets 403; every reply refuses framing; bodies are cut at
// Config.MaxBodyBytes and live streams bounded by Config.MaxEventStreams.
// Serve it with NewServer, whose timeouts bound every read, write and idle
// connection.
package dashboard
