package mscheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ListSort is the order of [Producer.List].
type ListSort string

const (
	// SortByKey (the zero value) lists tasks by key.
	SortByKey ListSort = ""
	// SortByRunAt lists tasks by run_at, earliest first, then by key.
	SortByRunAt ListSort = "run_at"
	// SortByPriority lists tasks in the claim order: highest priority
	// first, then earliest run_at, then by key.
	SortByPriority ListSort = "priority"
)

// sortKey is one field of a sort order.
type sortKey struct {
	field string
	desc  bool
}

// keys is the order's fields, the key last: every order is total, which
// paging from a task's sort values needs.
func (s ListSort) keys() []sortKey {
	switch s {
	case SortByRunAt:
		return []sortKey{{fRunAt, false}, {fID, false}}
	case SortByPriority:
		return []sortKey{{fPriority, true}, {fRunAt, false}, {fID, false}}
	}
	return []sortKey{{fID, false}}
}

func (s ListSort) sort() bson.D {
	var out bson.D
	for _, k := range s.keys() {
		dir := 1
		if k.desc {
			dir = -1
		}
		out = append(out, bson.E{Key: k.field, Value: dir})
	}
	return out
}

// validate refuses what List cannot do, before any query.
func (o *ListOpts) validate() error {
	switch o.Sort {
	case SortByKey, SortByRunAt, SortByPriority:
	default:
		return invalid("Sort", "must be SortByKey (\"\"), SortByRunAt (%q) or SortByPriority (%q), got %q", SortByRunAt, SortByPriority, string(o.Sort))
	}
	if !o.RunAtFrom.IsZero() && !o.RunAtBefore.IsZero() && !o.RunAtBefore.After(o.RunAtFrom) {
		return invalid("RunAtBefore", "must be after RunAtFrom (%s), got %s",
			o.RunAtFrom.UTC().Format(time.RFC3339Nano), o.RunAtBefore.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// runAtRange is the run_at condition of RunAtFrom and RunAtBefore, or nil.
// Stored times are whole milliseconds, so a bound with a fraction of one is
// rounded up: run_at >= t, and run_at < t, hold exactly when they hold of
// the next whole millisecond.
func runAtRange(from, before time.Time) bson.D {
	var out bson.D
	if !from.IsZero() {
		out = append(out, bson.E{Key: "$gte", Value: ceilMS(from)})
	}
	if !before.IsZero() {
		out = append(out, bson.E{Key: "$lt", Value: ceilMS(before)})
	}
	return out
}

func ceilMS(t time.Time) time.Time {
	c := t.Truncate(time.Millisecond)
	if c.Before(t) {
		c = c.Add(time.Millisecond)
	}
	return c
}

// afterSortValues reads the sort values of the task with key after, to
// page on from it under a sort other than by key.
func afterSortValues(ctx context.Context, coll *mongo.Collection, s ListSort, after string) (bson.Raw, error) {
	proj := bson.D{}
	for _, k := range s.keys() {
		proj = append(proj, bson.E{Key: k.field, Value: 1})
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: fID, Value: after}}, options.FindOne().SetProjection(proj)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("mscheduler: list: the task %q given as After no longer exists, so the page after it is unknown: start again from the first page: %w", after, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("mscheduler: list: read the task %q given as After: %w", after, err)
	}
	return raw, nil
}

// keysetFilter selects the tasks that come after the one whose sort values
// are in after, in the order of keys: an $or of (first field beyond its
// value), (first field equal and second field beyond), ..., (every field
// but the key equal and the key beyond). Plain operators only, so that an
// index on the leading fields can bound each branch.
func keysetFilter(keys []sortKey, after bson.Raw) bson.E {
	var or bson.A
	var equal bson.D
	for _, k := range keys {
		v := after.Lookup(k.field) // Type 0 if missing: sorts as null
		for _, cond := range beyond(k, v) {
			or = append(or, append(append(bson.D{}, equal...), cond))
		}
		equal = append(equal, equalTo(k.field, v))
	}
	return bson.E{Key: "$or", Value: or}
}

// sortBrackets are the $type aliases of the BSON types in the order
// MongoDB (and the development server) sorts values of different types,
// null and missing first (index 0, matched as {field: null} instead).
// Values of one bracket compare with $gt and $lt; a task stores dates and
// numbers, but a document edited by hand may hold any type, and paging
// must not lose it. MinKey, MaxKey and deprecated types are left out: the
// development server knows no alias for them.
var sortBrackets = []string{"null", "number", "string", "object", "array", "binData", "objectId", "bool", "date", "timestamp", "regex"}

// bracketOf is the index in sortBrackets of a value's type, or -1.
func bracketOf(v bson.RawValue) int {
	switch v.Type {
	case 0, bson.TypeNull, bson.TypeUndefined:
		return 0
	case bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeDecimal128:
		return 1
	case bson.TypeString, bson.TypeSymbol:
		return 2
	case bson.TypeEmbeddedDocument:
		return 3
	case bson.TypeArray:
		return 4
	case bson.TypeBinary:
		return 5
	case bson.TypeObjectID:
		return 6
	case bson.TypeBoolean:
		return 7
	case bson.TypeDateTime:
		return 8
	case bson.TypeTimestamp:
		return 9
	case bson.TypeRegex:
		return 10
	}
	return -1
}

// beyond is the conditions, any of which puts a field after v in the
// direction of k: a greater (smaller) value of the same type, or a type
// that sorts after (before) v's.
func beyond(k sortKey, v bson.RawValue) []bson.E {
	b := bracketOf(v)
	cmpOp := "$gt"
	if k.desc {
		cmpOp = "$lt"
	}
	if b < 0 {
		return []bson.E{{Key: k.field, Value: op(cmpOp, v)}}
	}
	var out []bson.E
	if b > 0 {
		out = append(out, bson.E{Key: k.field, Value: op(cmpOp, v)})
	}
	types := sortBrackets[b+1:]
	if k.desc {
		types = sortBrackets[1:max(b, 1)]
	}
	if len(types) > 0 {
		out = append(out, bson.E{Key: k.field, Value: op("$type", types)})
	}
	if k.desc && b > 0 {
		out = append(out, bson.E{Key: k.field, Value: nil}) // null or missing sorts first: last, descending
	}
	return out
}

// equalTo matches a field equal to v, null and missing alike ($eq: a
// regex edited in by hand is compared, not matched).
func equalTo(field string, v bson.RawValue) bson.E {
	if bracketOf(v) == 0 {
		return bson.E{Key: field, Value: nil}
	}
	return bson.E{Key: field, Value: op("$eq", v)}
}
