// Package histcheck checks the history of a task queue's runs against what
// the queue promises, from three accounts of them kept apart: the runs as
// their handlers logged them (outside the database), the run records the
// tasks keep, and the records of the run history collection.
//
// [Check] reports two kinds of violations:
//
//   - overlaps: two runs of one task by one worker that went on at once, and
//     any instant where more runs of a task than its concurrency went on
//     while their leases were valid. A run lasts from its handler's first
//     start to its last end. A run recorded expired is cut at its
//     lease_until (its handler may go on past the lease, but the lease no
//     longer holds), and a run recorded released that never logged an end
//     (its worker was killed after giving it back) is cut at its finish
//     time. A run cut that way may overlap the next run by up to
//     Input.Slack: the lease's end is a server time estimated by the worker
//     that wrote it, and another worker found it lapsed by its own estimate.
//     A run that never logged an end and was recorded neither expired nor
//     released has no known end and is left out (that it is lost is for the
//     caller to report);
//   - history: every run recorded by a task that the history holds not at
//     all, more than once, or with another outcome or task key, and every
//     history record that matches no recorded run.
//
// The package knows nothing of the database: the caller reads the three
// accounts and says which tasks to check by what it passes.
package histcheck
