// Package gateway lets processes in any language run mscheduler tasks:
// an http.Handler with which executors take runs over HTTP and JSON, renew
// their leases, and complete, fail or release them, and with which any
// client publishes, reads, lists and cancels tasks.
//
// The gateway is a front end on the consumer, and each executor is a
// worker: for each executor, collection and set of groups it runs a
// [mscheduler.Consumer] of raw BSON params whose worker id is the
// executor's, in pull mode ([mscheduler.ConsumerConfig].ClaimDemand), so
// that it claims only as many runs as that executor's takes ask for. Its
// runs are held in the task documents under the executor's id: a task of
// concurrency C runs on C executors at once, and DistinctWorkers,
// worker_ids and groups name executors as they name Go workers. Each
// claimed run's handler parks the run until its executor takes it, then
// waits for the executor's outcome while the consumer keeps the lease.
// Claims, leases, fences, retries, plans, run ends and history are the
// consumer's, so every guarantee of the library holds for runs done over
// HTTP. The consumer of an executor that has not called for a while
// (StaleAfterBeats heartbeats) and holds no run is stopped.
//
// An executor keeps a run by renewing it within the task's worker timeout
// (the lease_ms of its take); a run it stops renewing fails, saying so,
// and is retried as any failed run. A run's executor is the only one that
// may renew, complete, fail or release it. An executor that restarts and
// takes again with the same id and a new session gets its unfinished runs
// back at once, each delivery counted.
//
// Every request is guarded as the dashboard's are: a Host that is not a
// loopback name, an IP address or one of Config.AllowedHosts gets 421;
// without Config.Tokens only this machine's peers are served; a browser's
// cross-site request (Sec-Fetch-Site or Origin) gets 403, so that a page
// of another site cannot act through a gateway on loopback; bodies are
// bounded. A gateway serves only the task collections it is given
// (Config.Collections): a request naming another is answered 404, and
// none of it is read or written. A token sees and touches only the tasks
// of its groups and of no group. Durations are at most MaxDurationMS;
// waiting takes (MaxWaiting, MaxWaitingPerExecutor) and consumers
// (MaxPools) are bounded, beyond which a take gets 429; tokens are
// compared as SHA-256 digests, every one. A take with wait_ms 0 claims
// what is due when it comes (Consumer.ClaimNow), and a take that has runs
// answers once the consumer's look going on has ended (LookEnded), so that
// the runs claimed for it go out together. The routes and their answers are described by the OpenAPI
// document served at /openapi.json.
package gateway
