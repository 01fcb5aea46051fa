// Package dashboard is the web page of a task database: it shows, live,
// the tasks of every task collection with their runs and leases, the run
// history, the recurring tasks with their next planned times, and the
// worker processes with what they hold; and it acts on tasks (retry,
// cancel, run now, pause, resume, skip, delete) through the library's
// Producer, never by writing documents itself.
//
// A Dashboard is an http.Handler: mount it in a service under any prefix,
//
//	d, err := dashboard.New(client.Database("mscheduler"), &dashboard.Config{Token: token})
//	if err != nil {
//		log.Fatal(err)
//	}
//	mux.Handle("/jobs/", http.StripPrefix("/jobs", d))
//
// or serve it with "mscheduler dashboard". Its pages are server-rendered
// with html/template; the style sheet and the small script that keeps
// pages live are embedded, so it needs no build step and no network.
//
// Every web surface wants a token unless it is read-only on loopback:
// without Config.Token (or MSCHEDULER_DASHBOARD_TOKEN) a dashboard is
// read-only, its pages say so where the actions would be and every POST
// gets 403, since any process or page of this machine could otherwise act
// with no credentials; Config.ReadOnly makes a dashboard with a token
// read-only too. With a token every request needs it: as the basic-auth
// password, a Bearer header, or once per browser session from a login
// link, ?token=<token> on any page, which sets a session cookie (HttpOnly,
// SameSite=Lax, a digest of the token) and redirects to the page
// without the parameter. "mscheduler dashboard" makes a token at each
// start and prints that link, unless it is --read-only or the environment
// sets one.
//
// Every query is bounded by Config.QueryTimeout (sent to the server as
// maxTimeMS) and by a page size. Actions are POSTs refused from other
// origins (net/http's CrossOriginProtection), which also keeps a page on
// another port of the same host, where the cookie goes too, from acting.
//
// Before any of that, every request is guarded: a Host the dashboard does
// not answer to (DNS rebinding) gets 421, and without a token a peer on
// another machine gets 403; every reply refuses framing; bodies are cut at
// Config.MaxBodyBytes and live streams bounded by Config.MaxEventStreams.
// Serve it with NewServer, whose timeouts bound every read, write and idle
// connection.
package dashboard
