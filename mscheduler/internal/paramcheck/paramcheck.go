// Package paramcheck checks a task's params against the JSON Schema a
// collection carries for them: the door at which a publish with the wrong
// params is refused, naming the field, before anything is written.
//
// Params are BSON; the schema sees them as relaxed extended JSON, the form
// mongosh and the operator command print: numbers and strings as such, a
// date as {"$date": "..."}, an ObjectId as {"$oid": "..."}.
package paramcheck

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// schemaURL names the schema inside the compiler; it never leaves it.
const schemaURL = "mscheduler:params.json"

// A Checker is a compiled schema. It is safe for concurrent use.
type Checker struct {
	schema *jsonschema.Schema
}

// Compile reads a JSON Schema (draft 2020-12 unless it says otherwise with
// $schema). It must be self-contained: a $ref to another document is
// refused rather than fetched.
func Compile(schemaJSON []byte) (*Checker, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("not a JSON Schema: %w", err)
	}
	return &Checker{schema: s}, nil
}

// noLoader refuses every document a schema refers to: a schema stored in
// the collection must not make a publish read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: a params schema must be self-contained ($ref within it only)", url)
}

// Check says why params do not satisfy the schema, naming the field as a
// JSON pointer ("at '/to': ..."), or returns nil. A missing params value
// (never set) is checked as null.
func (c *Checker) Check(params bson.RawValue) error {
	v, err := asJSON(params)
	if err != nil {
		return err
	}
	err = c.schema.Validate(v)
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	return errors.New(firstLeaf(verr).Error())
}

// firstLeaf is the first error with no causes: the one that names a field
// and says what is wrong with it (its parents only say "doesn't validate").
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}

// asJSON is params as the JSON value a schema validates.
func asJSON(params bson.RawValue) (any, error) {
	if params.Type == 0 {
		return nil, nil
	}
	wrapped, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: params}}, false, false)
	if err != nil {
		return nil, fmt.Errorf("params as JSON: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(wrapped))
	if err != nil {
		return nil, fmt.Errorf("params as JSON: %w", err)
	}
	return doc.(map[string]any)["v"], nil
}
