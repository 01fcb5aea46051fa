package runend

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestRidersFillABatchToItsBound: a batch of run ends takes carried
// statements (history marks' removals) only up to its bound, the larger of
// its EndBatchMax and query.MaxStatements, and leaves the rest: FerretDB
// holds a pool connection per statement of an update until the command
// ends, and a command of more statements than its pool wedged the
// development server.
func TestRidersFillABatchToItsBound(t *testing.T) {
	for _, c := range []struct{ max, ends, carried, taken, left int }{
		{64, 60, 150, 4, 146}, {64, 64, 10, 0, 10}, {64, 2, 10, 10, 0}, {1, 2, 100, 62, 38}, {200, 64, 300, 136, 164},
	} {
		b := &Batcher{max: c.max}
		b.Carry(make([]mongo.WriteModel, c.carried))
		taken := len(b.TakeRiders(c.ends))
		if left := len(b.TakeCarried()); taken != c.taken || left != c.left {
			t.Errorf("EndBatchMax %d, %d run ends, %d carried: took %d and left %d, want %d and %d", c.max, c.ends, c.carried, taken, left, c.taken, c.left)
		}
	}
}
