package main

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A $match may hold $expr, an aggregation expression, of which the front knows enough to read a
// field whose name holds a dot, as an update's updatedFields names a nested field it set
// ("plan.started"): only $getField (MongoDB 5.0) reads such a name. compileExpr refuses any
// other operator, naming it.

// supportedExpr lists what compileExpr knows, for its errors and the README.
const supportedExpr = "$getField, $literal, $eq, $ne, field paths and constants"

// expression evaluates to a value for one document; a zero RawValue (Type 0) is missing.
type expression func(doc bson.Raw) bson.RawValue

func compileExprMatch(v bson.RawValue) (matcher, error) {
	e, err := compileExpr(v)
	if err != nil {
		return nil, err
	}
	return func(doc bson.Raw) bool { return truthy(e(doc)) }, nil
}

func compileExpr(v bson.RawValue) (expression, error) {
	if s, ok := v.StringValueOK(); ok && strings.HasPrefix(s, "$") {
		if strings.HasPrefix(s, "$$") {
			return nil, unsupportedExpr(s)
		}
		path := strings.Split(s[1:], ".")
		return func(doc bson.Raw) bson.RawValue { return lookupPath(doc, path) }, nil
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return constant(v), nil
	}
	elems, _ := doc.Elements()
	if len(elems) != 1 || !strings.HasPrefix(elems[0].Key(), "$") {
		// A document of fields is an object expression, which the front does not build.
		if len(elems) == 0 {
			return constant(v), nil
		}
		return nil, unsupportedExpr("an object expression")
	}
	op, arg := elems[0].Key(), elems[0].Value()
	switch op {
	case "$literal":
		return constant(arg), nil
	case "$getField":
		return compileGetField(arg)
	case "$eq", "$ne":
		return compileEquality(op, arg)
	}
	return nil, unsupportedExpr(op)
}

func constant(v bson.RawValue) expression {
	return func(bson.Raw) bson.RawValue { return v }
}

// compileGetField reads {$getField: {field, input}}, or {$getField: name} of the document.
func compileGetField(arg bson.RawValue) (expression, error) {
	fieldArg, inputArg := arg, bson.RawValue{}
	if d, ok := arg.DocumentOK(); ok {
		fieldArg, inputArg = d.Lookup("field"), d.Lookup("input")
	}
	fieldExpr, err := compileExpr(fieldArg)
	if err != nil {
		return nil, err
	}
	field, ok := fieldExpr(nil).StringValueOK()
	if !ok {
		return nil, newCommandError(codeBadValue, "$getField needs a constant string field")
	}
	input := func(doc bson.Raw) bson.RawValue { return bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc} }
	if inputArg.Type != 0 {
		if input, err = compileExpr(inputArg); err != nil {
			return nil, err
		}
	}
	return func(doc bson.Raw) bson.RawValue {
		in, ok := input(doc).DocumentOK()
		if !ok {
			return bson.RawValue{}
		}
		v, err := in.LookupErr(field) // the name as it is, dots and all
		if err != nil {
			return bson.RawValue{}
		}
		return v
	}, nil
}

func compileEquality(op string, arg bson.RawValue) (expression, error) {
	arr, ok := arg.ArrayOK()
	values, _ := arr.Values()
	if !ok || len(values) != 2 {
		return nil, newCommandError(codeBadValue, "%s needs an array of two expressions", op)
	}
	a, err := compileExpr(values[0])
	if err != nil {
		return nil, err
	}
	b, err := compileExpr(values[1])
	if err != nil {
		return nil, err
	}
	return func(doc bson.Raw) bson.RawValue {
		// An aggregation compares a missing value as null.
		same := equalValues(orNull(a(doc)), orNull(b(doc)))
		return boolValue(same == (op == "$eq"))
	}, nil
}

func orNull(v bson.RawValue) bson.RawValue {
	if v.Type == 0 {
		return bson.RawValue{Type: bson.TypeNull}
	}
	return v
}

func boolValue(b bool) bson.RawValue {
	if b {
		return bson.RawValue{Type: bson.TypeBoolean, Value: []byte{1}}
	}
	return bson.RawValue{Type: bson.TypeBoolean, Value: []byte{0}}
}

// lookupPath follows a field path through sub-documents; arrays on the way are not traversed.
func lookupPath(doc bson.Raw, path []string) bson.RawValue {
	v := bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}
	for _, key := range path {
		d, ok := v.DocumentOK()
		if !ok {
			return bson.RawValue{}
		}
		next, err := d.LookupErr(key)
		if err != nil {
			return bson.RawValue{}
		}
		v = next
	}
	return v
}

func unsupportedExpr(op string) error {
	return newCommandError(codeNotImplemented,
		"the development server's change streams do not support %s in $expr (they support %s)", op, supportedExpr)
}
