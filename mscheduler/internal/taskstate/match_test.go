package taskstate

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// matches evaluates the filters the run end's cases use on a flat state:
// equality and $ne, $lt, $lte, $gt, $gte, $in, $nin, $or, on numbers and
// strings, as MongoDB does for those values (a missing field equals nil).
// It panics on anything else, so that a case written with another
// operator is noticed here rather than passed over.
func matches(filter bson.D, state map[string]any) bool {
	for _, e := range filter {
		if e.Key == "$or" {
			any := false
			for _, sub := range e.Value.(bson.A) {
				any = any || matches(sub.(bson.D), state)
			}
			if !any {
				return false
			}
			continue
		}
		if !matchValue(state[e.Key], e.Value) {
			return false
		}
	}
	return true
}

func matchValue(have, cond any) bool {
	ops, isOps := cond.(bson.D)
	if !isOps || len(ops) == 0 || ops[0].Key[0] != '$' {
		return equal(have, cond)
	}
	for _, op := range ops {
		if !matchOp(have, op.Key, op.Value) {
			return false
		}
	}
	return true
}

func matchOp(have any, op string, v any) bool {
	switch op {
	case "$ne":
		return !equal(have, v)
	case "$in", "$nin":
		in := false
		for _, x := range v.(bson.A) {
			in = in || equal(have, x)
		}
		return in == (op == "$in")
	case "$lt", "$lte", "$gt", "$gte":
		h, ok1 := number(have)
		w, ok2 := number(v)
		if !ok1 || !ok2 {
			return false // MongoDB compares within a type bracket only
		}
		switch op {
		case "$lt":
			return h < w
		case "$lte":
			return h <= w
		case "$gt":
			return h > w
		}
		return h >= w
	}
	panic(fmt.Sprintf("matches: operator %s not modelled", op))
}

func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return fmt.Sprint(a) == fmt.Sprint(b) && (a == nil) == (b == nil)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
