package main

import (
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// commandShape names what a command's filter tests, for the lock report: " {a,b:$lte} sort{c}" for
// a find, the filter of the first statement and its update's operators for an update ("x3" when it
// has three statements), the first stage of a pipeline and the number of stages for an aggregate;
// "" for other commands. Field names are sorted, and a dotted path is named by its first part
// ("holders.…"), so that one query of many workers, each testing its own entry of a map, is one
// kind. It reads only the request.
func commandShape(req []byte) string {
	cmd, ok := parseCommand(req)
	if !ok {
		return ""
	}
	b := cmd.body
	switch cmd.name() {
	case "find":
		return " " + fieldsOf(b.Lookup("filter")) + " sort" + fieldsOf(b.Lookup("sort"))
	case "findAndModify", "findandmodify":
		return " " + fieldsOf(b.Lookup("query")) + " sort" + fieldsOf(b.Lookup("sort")) + " update" + fieldsOf(b.Lookup("update"))
	case "count":
		return " " + fieldsOf(b.Lookup("query"))
	case "aggregate":
		pipeline, _ := b.Lookup("pipeline").ArrayOK() // not an array: no stages
		stages, _ := pipeline.Values()
		if len(stages) == 0 {
			return " []"
		}
		return fmt.Sprintf(" [%s %s, %d stages]", firstKey(stages[0]), fieldsOf(firstValue(stages[0])), len(stages))
	case "update":
		return statementsShape(cmd, "updates", "u")
	case "delete":
		return statementsShape(cmd, "deletes", "")
	}
	return ""
}

// statementsShape is the shape of a write's first statement (its q, and its field update when
// not "") and how many statements the write holds.
func statementsShape(cmd *command, field, update string) string {
	stmts := cmd.sequences[field]
	if len(stmts) == 0 {
		arr, _ := cmd.body.Lookup(field).ArrayOK()
		vals, _ := arr.Values()
		for _, v := range vals {
			if d, ok := v.DocumentOK(); ok {
				stmts = append(stmts, d)
			}
		}
	}
	if len(stmts) == 0 {
		return ""
	}
	shape := fmt.Sprintf(" x%d %s", len(stmts), fieldsOf(stmts[0].Lookup("q")))
	if update != "" {
		shape += " " + update + fieldsOf(stmts[0].Lookup(update))
	}
	return shape
}

// fieldsOf names the fields of a document, sorted: each with the first operator it is tested
// with, if any ("run_at:$lte"), a dotted path by its first part. Not a document: "{}".
func fieldsOf(v bson.RawValue) string {
	doc, ok := v.DocumentOK()
	if !ok {
		return "{}"
	}
	elems, _ := doc.Elements()
	var names []string
	for _, e := range elems {
		name := e.Key()
		if first, rest, dotted := strings.Cut(name, "."); dotted && rest != "" {
			name = first + ".…"
		}
		if op := firstKey(e.Value()); strings.HasPrefix(op, "$") {
			name += ":" + op
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return "{" + strings.Join(slices.Compact(names), ",") + "}"
}

// firstKey is a document's first field name ("" when v is not a document or is empty).
func firstKey(v bson.RawValue) string {
	doc, ok := v.DocumentOK()
	if !ok {
		return ""
	}
	elems, err := doc.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// firstValue is a document's first field's value (zero when there is none).
func firstValue(v bson.RawValue) bson.RawValue {
	doc, ok := v.DocumentOK()
	if !ok {
		return bson.RawValue{}
	}
	elems, err := doc.Elements()
	if err != nil || len(elems) == 0 {
		return bson.RawValue{}
	}
	return elems[0].Value()
}
