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
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// schemaURL names the schema inside the compiler; it never leaves it.
const schemaURL = "mscheduler:params.json"

// A Checker is a compiled schema. It is safe for concurrent use.
type Checker struct {
	schema *jsonschema.Schema
	key    [sha256.Size]byte // identifies the schema among those that overran
}

// Bounds of a schema: it is stored in the collection, where anyone who can
// edit it can also write one that takes hours to check (combinators nested
// a few dozen deep double the work at each level). A publish must never
// hang on it.
const (
	// MaxSchemaBytes bounds a schema's JSON text.
	MaxSchemaBytes = 64 << 10
	// CheckBudget bounds one check of one task's params.
	CheckBudget = time.Second
)

// ErrTooSlow says a check ran past CheckBudget. The check goes on in the
// background until it ends; meanwhile every check against the same schema
// is refused at once, so that a slow schema costs one CPU, not one per
// publish.
var ErrTooSlow = errors.New("the params schema took longer than 1s to check: simplify it (deeply nested anyOf, oneOf or $ref make the work grow exponentially)")

// overrunning are the schemas with a check still running past its budget.
var overrunning sync.Map // [sha256.Size]byte -> struct{}

// Compile reads a JSON Schema (draft 2020-12 unless it says otherwise with
// $schema). It must be self-contained: a $ref to another document is
// refused rather than fetched.
func Compile(schemaJSON []byte) (*Checker, error) {
	if len(schemaJSON) > MaxSchemaBytes {
		return nil, fmt.Errorf("%d bytes, over %d: a params schema describes params, it does not hold data", len(schemaJSON), MaxSchemaBytes)
	}
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
	return &Checker{schema: s, key: sha256.Sum256(schemaJSON)}, nil
}

// Probe checks a few values of every JSON type against the schema, so
// that one too slow to check is refused when it is set rather than at
// each publish. It says only whether the checks finished in time.
func (c *Checker) Probe() error {
	for _, v := range []any{nil, map[string]any{}, []any{}, "", json.Number("0"), true} {
		if _, err := c.validate(v); errors.Is(err, ErrTooSlow) {
			return err
		}
	}
	return nil
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
	err, slow := c.validate(v)
	if slow != nil {
		return slow
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	return errors.New(firstLeaf(verr).Error())
}

// validate runs the schema on v within CheckBudget: the first error is the
// schema's verdict, the second ErrTooSlow when there is none in time.
func (c *Checker) validate(v any) (verdict, slow error) {
	if _, busy := overrunning.Load(c.key); busy {
		return nil, ErrTooSlow
	}
	done := make(chan error, 1)
	go func() { done <- c.schema.Validate(v) }()
	timer := time.NewTimer(CheckBudget)
	defer timer.Stop()
	select {
	case err := <-done:
		return err, nil
	case <-timer.C:
		if _, busy := overrunning.LoadOrStore(c.key, struct{}{}); !busy {
			go func() {
				<-done
				overrunning.Delete(c.key)
			}()
		}
		return nil, ErrTooSlow
	}
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
