package main

import (
	"regexp"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A change stream's $match runs in the front, on each event, with MongoDB's query semantics for
// the operators it knows; compileMatch refuses any other, naming it.

// supportedMatch lists what compileMatch knows, for its errors and the README.
const supportedMatch = "implicit equality, $eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $regex, $not, $and, $or, $nor, and $expr with " + supportedExpr

// matcher reports whether a document matches a compiled filter.
type matcher func(doc bson.Raw) bool

// valueTest reports whether the values a path names (see pathValues) pass one condition.
type valueTest func(values []bson.RawValue) bool

func compileMatch(filter bson.Raw) (matcher, error) {
	elems, err := filter.Elements()
	if err != nil {
		return nil, newCommandError(codeFailedToParse, "$match: %v", err)
	}
	var all []matcher
	for _, e := range elems {
		m, err := compileMatchElement(e.Key(), e.Value())
		if err != nil {
			return nil, err
		}
		if m != nil {
			all = append(all, m)
		}
	}
	return func(doc bson.Raw) bool {
		for _, m := range all {
			if !m(doc) {
				return false
			}
		}
		return true
	}, nil
}

func compileMatchElement(key string, v bson.RawValue) (matcher, error) {
	switch key {
	case "$and", "$or", "$nor":
		return compileLogical(key, v)
	case "$comment":
		return nil, nil
	case "$expr":
		return compileExprMatch(v)
	}
	if strings.HasPrefix(key, "$") {
		return nil, unsupportedOperator(key)
	}
	test, err := compileCondition(v)
	if err != nil {
		return nil, err
	}
	path := strings.Split(key, ".")
	return func(doc bson.Raw) bool {
		return test(pathValues(doc, path))
	}, nil
}

func compileLogical(op string, v bson.RawValue) (matcher, error) {
	arr, ok := v.ArrayOK()
	values, _ := arr.Values()
	if !ok || len(values) == 0 {
		return nil, newCommandError(codeBadValue, "%s must be a nonempty array", op)
	}
	subs := make([]matcher, len(values))
	for i, sv := range values {
		d, ok := sv.DocumentOK()
		if !ok {
			return nil, newCommandError(codeBadValue, "%s entries must be objects", op)
		}
		m, err := compileMatch(d)
		if err != nil {
			return nil, err
		}
		subs[i] = m
	}
	anyOf := func(doc bson.Raw) bool {
		for _, m := range subs {
			if m(doc) {
				return true
			}
		}
		return false
	}
	switch op {
	case "$and":
		return func(doc bson.Raw) bool {
			for _, m := range subs {
				if !m(doc) {
					return false
				}
			}
			return true
		}, nil
	case "$or":
		return anyOf, nil
	default: // $nor
		return func(doc bson.Raw) bool { return !anyOf(doc) }, nil
	}
}

// compileCondition compiles what a filter says of a path: a value (equality) or a document of
// operators.
func compileCondition(v bson.RawValue) (valueTest, error) {
	if !isOperatorDocument(v) {
		return equalsTest(v), nil
	}
	doc := v.Document()
	elems, _ := doc.Elements()
	var tests []valueTest
	for _, e := range elems {
		if e.Key() == "$options" {
			if _, err := doc.LookupErr("$regex"); err != nil {
				return nil, newCommandError(codeBadValue, "$options needs a $regex")
			}
			continue
		}
		t, err := compileOperator(e.Key(), e.Value(), doc)
		if err != nil {
			return nil, err
		}
		tests = append(tests, t)
	}
	return func(values []bson.RawValue) bool {
		for _, t := range tests {
			if !t(values) {
				return false
			}
		}
		return true
	}, nil
}

// isOperatorDocument says whether v is a document of operators ({$gt: 1}) rather than a value.
func isOperatorDocument(v bson.RawValue) bool {
	doc, ok := v.DocumentOK()
	if !ok {
		return false
	}
	elems, _ := doc.Elements()
	return len(elems) > 0 && strings.HasPrefix(elems[0].Key(), "$")
}

func compileOperator(op string, arg bson.RawValue, doc bson.Raw) (valueTest, error) {
	switch op {
	case "$eq":
		return equalsTest(arg), nil
	case "$ne":
		eq := equalsTest(arg)
		return func(values []bson.RawValue) bool { return !eq(values) }, nil
	case "$in", "$nin":
		in, err := inTest(op, arg)
		if err != nil || op == "$in" {
			return in, err
		}
		return func(values []bson.RawValue) bool { return !in(values) }, nil
	case "$gt", "$gte", "$lt", "$lte":
		return compareTest(op, arg), nil
	case "$exists":
		want := truthy(arg)
		return func(values []bson.RawValue) bool { return (len(values) > 0) == want }, nil
	case "$regex":
		re, err := compileRegex(arg, doc.Lookup("$options"))
		if err != nil {
			return nil, err
		}
		return anyValue(func(v bson.RawValue) bool { return matchesRegex(re, v) }), nil
	case "$not":
		if arg.Type == bson.TypeRegex {
			re, err := compileRegex(arg, bson.RawValue{})
			if err != nil {
				return nil, err
			}
			matches := anyValue(func(v bson.RawValue) bool { return matchesRegex(re, v) })
			return func(values []bson.RawValue) bool { return !matches(values) }, nil
		}
		if !isOperatorDocument(arg) {
			return nil, newCommandError(codeBadValue, "$not needs a regex or a document of operators")
		}
		t, err := compileCondition(arg)
		if err != nil {
			return nil, err
		}
		return func(values []bson.RawValue) bool { return !t(values) }, nil
	}
	return nil, unsupportedOperator(op)
}

func unsupportedOperator(op string) error {
	return newCommandError(codeNotImplemented,
		"the development server's change streams do not support %s in $match (they support %s)", op, supportedMatch)
}

// equalsTest is MongoDB's equality: a value equal to arg, where null also matches a missing path,
// and a regex matches the strings it matches.
func equalsTest(arg bson.RawValue) valueTest {
	if arg.Type == bson.TypeRegex {
		re, err := compileRegex(arg, bson.RawValue{})
		if err == nil {
			return anyValue(func(v bson.RawValue) bool { return matchesRegex(re, v) || equalValues(v, arg) })
		}
	}
	if arg.Type == bson.TypeNull {
		return func(values []bson.RawValue) bool {
			return len(values) == 0 || anyValue(func(v bson.RawValue) bool { return v.Type == bson.TypeNull || v.Type == bson.TypeUndefined })(values)
		}
	}
	return anyValue(func(v bson.RawValue) bool { return equalValues(v, arg) })
}

func inTest(op string, arg bson.RawValue) (valueTest, error) {
	arr, ok := arg.ArrayOK()
	if !ok {
		return nil, newCommandError(codeBadValue, "%s needs an array", op)
	}
	values, _ := arr.Values()
	tests := make([]valueTest, len(values))
	for i, v := range values {
		if isOperatorDocument(v) {
			return nil, newCommandError(codeBadValue, "cannot nest $ operators under %s", op)
		}
		tests[i] = equalsTest(v)
	}
	return func(vs []bson.RawValue) bool {
		for _, t := range tests {
			if t(vs) {
				return true
			}
		}
		return false
	}, nil
}

func compareTest(op string, arg bson.RawValue) valueTest {
	return anyValue(func(v bson.RawValue) bool {
		c, ok := compareValues(v, arg)
		if !ok {
			return false
		}
		switch op {
		case "$gt":
			return c > 0
		case "$gte":
			return c >= 0
		case "$lt":
			return c < 0
		default:
			return c <= 0
		}
	})
}

func anyValue(pred func(bson.RawValue) bool) valueTest {
	return func(values []bson.RawValue) bool {
		for _, v := range values {
			if pred(v) {
				return true
			}
		}
		return false
	}
}

// truthy is how MongoDB reads a flag ($exists, multi, remove...): anything but false, 0, null
// and a missing value means true.
func truthy(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeBoolean:
		return v.Boolean()
	case 0, bson.TypeNull, bson.TypeUndefined:
		return false
	}
	if f, ok := v.AsFloat64OK(); ok {
		return f != 0
	}
	return true
}

func compileRegex(pattern, options bson.RawValue) (*regexp.Regexp, error) {
	var expr, opts string
	switch pattern.Type {
	case bson.TypeString:
		expr = pattern.StringValue()
	case bson.TypeRegex:
		expr, opts = pattern.Regex()
	default:
		return nil, newCommandError(codeBadValue, "$regex has to be a string or a regex")
	}
	if s, ok := options.StringValueOK(); ok {
		opts = s
	}
	var flags string
	for _, o := range opts {
		switch o {
		case 'i', 'm', 's':
			flags += string(o)
		default:
			return nil, newCommandError(codeNotImplemented, "the development server's change streams do not support the regex option %q", o)
		}
	}
	if flags != "" {
		expr = "(?" + flags + ")" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, newCommandError(codeBadValue, "$regex %q: %v (the development server uses Go's RE2 syntax)", expr, err)
	}
	return re, nil
}

func matchesRegex(re *regexp.Regexp, v bson.RawValue) bool {
	s, ok := v.StringValueOK()
	return ok && re.MatchString(s)
}

// pathValues returns what a dotted path names in doc, as MongoDB's queries see it: an array met on
// the way is searched element by element (or indexed by a numeric part), and an array at the end
// stands for itself and for each of its elements.
func pathValues(doc bson.Raw, path []string) []bson.RawValue {
	var out []bson.RawValue
	collectPath(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}, path, &out)
	return out
}

func collectPath(v bson.RawValue, path []string, out *[]bson.RawValue) {
	if len(path) == 0 {
		*out = append(*out, v)
		if arr, ok := v.ArrayOK(); ok {
			elems, _ := arr.Values()
			*out = append(*out, elems...)
		}
		return
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		if child, err := v.Document().LookupErr(path[0]); err == nil {
			collectPath(child, path[1:], out)
		}
	case bson.TypeArray:
		arr := v.Array()
		if i, err := strconv.Atoi(path[0]); err == nil && i >= 0 {
			if child, err := arr.IndexErr(uint(i)); err == nil {
				collectPath(child, path[1:], out)
			}
		}
		elems, _ := arr.Values()
		for _, e := range elems {
			if e.Type == bson.TypeEmbeddedDocument {
				collectPath(e, path, out)
			}
		}
	}
}
