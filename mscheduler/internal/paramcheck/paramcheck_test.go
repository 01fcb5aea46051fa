package paramcheck

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

const emailSchema = `{
  "type": "object",
  "required": ["to"],
  "properties": {
    "to": {"type": "string", "minLength": 3},
    "tries": {"type": "integer", "maximum": 5},
    "cc": {"type": "array", "items": {"type": "string"}}
  },
  "additionalProperties": false
}`

func value(t *testing.T, v any) bson.RawValue {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(raw).Lookup("v")
}

// A refusal names the field as a JSON pointer and says what is wrong.
func TestCheckNamesTheField(t *testing.T) {
	c, err := Compile([]byte(emailSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		params bson.RawValue
		want   string // empty: accepted
	}{
		{"valid", value(t, bson.D{{Key: "to", Value: "ada@example.com"}, {Key: "tries", Value: int32(2)}}), ""},
		{"int64 and double integers", value(t, bson.D{{Key: "to", Value: "bob"}, {Key: "tries", Value: 3.0}}), ""},
		{"missing", value(t, bson.D{{Key: "tries", Value: 1}}), "at '': missing property 'to'"},
		{"wrong type", value(t, bson.D{{Key: "to", Value: 42}}), "at '/to': got number, want string"},
		{"too large", value(t, bson.D{{Key: "to", Value: "ada"}, {Key: "tries", Value: int64(9)}}), "at '/tries': maximum: got 9, want 5"},
		{"nested", value(t, bson.D{{Key: "to", Value: "ada"}, {Key: "cc", Value: bson.A{"x", 7}}}), "at '/cc/1': got number, want string"},
		{"extra", value(t, bson.D{{Key: "to", Value: "ada"}, {Key: "bcc", Value: "x"}}), "additional properties 'bcc' not allowed"},
		{"not a document", value(t, "ada"), "at '': got string, want object"},
		{"none", bson.RawValue{}, "at '': got null, want object"},
	} {
		err := c.Check(tc.params)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// A schema that is not JSON, not a schema, or refers outside itself is
// refused at Compile.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type": `, "not JSON"},
		{`{"type": "strang"}`, "not a JSON Schema"},
		{`{"$ref": "https://example.com/other.json"}`, "self-contained"},
		{`{"$ref": "file:///etc/passwd"}`, "self-contained"},
	} {
		if _, err := Compile([]byte(tc.schema)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%s): %v, want an error containing %q", tc.schema, err, tc.want)
		}
	}
	if _, err := Compile([]byte(`{"$defs": {"addr": {"type": "string"}}, "properties": {"to": {"$ref": "#/$defs/addr"}}}`)); err != nil {
		t.Errorf("a $ref within the schema: %v", err)
	}
}

// slowSchema nests anyOf levels deep, each referring twice to the next:
// the work doubles at each level, the text stays small.
func slowSchema(levels int) string {
	var b strings.Builder
	b.WriteString(`{"$ref": "#/$defs/l0", "$defs": {`)
	for i := range levels {
		fmt.Fprintf(&b, `"l%d": {"anyOf": [{"$ref": "#/$defs/l%d"}, {"$ref": "#/$defs/l%d"}]}, `, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"l%d": {"not": {}}}}`, levels)
	return b.String()
}

// A schema whose checks would take minutes is refused by Probe, and a
// check against it gives up at CheckBudget; while one such check still
// runs, the next ones are refused at once.
func TestSlowSchemaIsBounded(t *testing.T) {
	c, err := Compile([]byte(slowSchema(30)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Probe(); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("Probe: %v, want ErrTooSlow", err)
	}
	start := time.Now()
	if err := c.Check(value(t, "x")); !errors.Is(err, ErrTooSlow) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("a check while another overruns: %v after %s; want ErrTooSlow at once", err, time.Since(start))
	}
	if _, err := Compile([]byte(`{"description": "` + strings.Repeat("x", MaxSchemaBytes) + `"}`)); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a schema over MaxSchemaBytes: %v", err)
	}
	fast, err := Compile([]byte(slowSchema(3)))
	if err != nil || fast.Probe() != nil {
		t.Errorf("a shallow schema of the same shape: %v, %v", err, fast.Probe())
	}
}
