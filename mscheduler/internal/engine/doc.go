// Package engine is a consumer of a task collection on raw documents:
// the claim loop (when to claim, and how many slots, under the server's
// pressure and the peers' shares), the sweep loop (freeing lapsed
// leases), the upkeep loop (announcing the consumer, the check and the
// maintenance pass of the lease holder), the execution of runs (local retries, deadlines from
// the task, run ends written alone or in batches) and the plan gate at
// the first start of an occurrence. The mechanisms it drives are the
// packages beside it: taskstate builds every write, lease keeps runs
// leased, runend writes their ends, upkeep sweeps and checks, and so on.
//
// It knows nothing of params and results, nor of the rules of plans and
// schema versions, which belong to the public package: a front end gives
// it a PrepareFunc, which turns a claimed task into the call of its
// handler, and Documents, which inspects a stored task (plans included),
// computes a plan's next step and checks the collection's schema.
// mscheduler.Consumer[P, R] is that front end, and the HTTP gateway goes
// through it.
//
// Every goroutine has one owner: the claim loop owns claimState, the
// sweep loop owns sweepState, the upkeep loop upkeepState, each run its goroutine; fields shared
// among them say who writes and who reads.
package engine
