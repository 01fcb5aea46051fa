package mschedulertest

import (
	"cmp"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/internal/taskstate"
)

// CheckTask returns the invariants that the stored task raw (read with or
// without its runs) breaks, each as its name and what is wrong; none for a
// task that only the library wrote. r is the retention its producers and
// consumers were given; a zero field takes its default, as theirs do.
// Tests outside the library check with it what its writers left, as the
// library's own tests do after every write.
func CheckTask(raw bson.Raw, r mscheduler.Retention) []string {
	policy := taskstate.Retention{
		Succeeded: cmp.Or(r.Succeeded, mscheduler.RetentionSucceededDefault),
		Failed:    cmp.Or(r.Failed, mscheduler.RetentionFailedDefault),
	}
	var out []string
	for _, v := range taskstate.Check(raw, policy) {
		out = append(out, v.String())
	}
	return out
}
