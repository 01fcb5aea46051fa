package worker

import "time"

// SetFirstStartTimeout sets the deadline of w's first start attempt, so
// that a test can make a start outgrow it in seconds.
func SetFirstStartTimeout(w *Worker, d time.Duration) { w.startTimeout = d }
