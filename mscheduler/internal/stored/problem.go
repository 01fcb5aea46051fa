package stored

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Problem says what is wrong with a stored document, naming the field as
// stored (max_failed_runs, plan.cron, holders.w1.lease_until, ...).
type Problem struct {
	Field  string
	Reason string
}

func (p *Problem) Error() string { return "field " + p.Field + " " + p.Reason }

// WholeDocument is the field of a problem that is not any one field's.
const WholeDocument = "(document)"

// Problemf is a problem of field.
func Problemf(field, format string, args ...any) *Problem {
	return &Problem{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// FieldsOf maps the bson field names of a struct type to their Go types.
func FieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("bson"), ",")
		if tag != "" && tag != "-" {
			out[tag] = t.Field(i).Type
		}
	}
	return out
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawValueType = reflect.TypeFor[bson.RawValue]()
)

// checkValue says whether v decodes into typ, naming the first field at
// fault under path; sub-documents are checked field by field.
func checkValue(path string, typ reflect.Type, v bson.RawValue) *Problem {
	if typ.Kind() == reflect.Pointer && v.Type != bson.TypeNull {
		typ = typ.Elem()
	}
	doc, isDoc := v.DocumentOK()
	switch {
	case isDoc && typ.Kind() == reflect.Struct && typ != timeType && typ != rawValueType:
		fields := FieldsOf(typ)
		elems, _ := doc.Elements()
		for _, e := range elems {
			if ft, ok := fields[e.Key()]; ok {
				if p := checkValue(path+"."+e.Key(), ft, e.Value()); p != nil {
					return p
				}
			}
		}
		return nil
	case isDoc && typ.Kind() == reflect.Map && typ.Elem().Kind() == reflect.Struct:
		elems, _ := doc.Elements()
		for _, e := range elems {
			if p := checkValue(path+"."+e.Key(), typ.Elem(), e.Value()); p != nil {
				return p
			}
		}
		return nil
	}
	if err := v.Unmarshal(reflect.New(typ).Interface()); err != nil {
		return &Problem{path, fmt.Sprintf("must be %s, got %s", DescribeType(typ), DescribeValue(v))}
	}
	return nil
}

// CheckValue says whether a stored value decodes into a Go value of type
// typ, naming path when it does not.
func CheckValue(path string, typ reflect.Type, v bson.RawValue) *Problem {
	return checkValue(path, typ, v)
}

// DecodeLenient decodes a stored document into out, a pointer to a struct
// whose fields (by bson name) are fields. It never fails: when the document
// does not decode, the fields that do not decode alone are left zero, and
// the first of them is named in the problem returned.
func DecodeLenient(raw bson.Raw, fields map[string]reflect.Type, out any) *Problem {
	probs := decodeAll(raw, fields, out)
	if len(probs) == 0 {
		return nil
	}
	return probs[0]
}

// decodeAll is DecodeLenient returning every field that does not decode.
func decodeAll(raw bson.Raw, fields map[string]reflect.Type, out any) []*Problem {
	err := bson.Unmarshal(raw, out)
	if err == nil {
		return nil
	}
	reflect.ValueOf(out).Elem().SetZero()
	elems, verr := raw.Elements()
	if verr != nil {
		return []*Problem{{WholeDocument, fmt.Sprintf("is not valid BSON: %v", verr)}}
	}
	var probs []*Problem
	good := bson.D{}
	for _, e := range elems {
		if typ, ok := fields[e.Key()]; ok {
			if p := checkValue(e.Key(), typ, e.Value()); p != nil {
				probs = append(probs, p)
				continue
			}
		}
		good = append(good, bson.E{Key: e.Key(), Value: e.Value()})
	}
	if b, err := bson.Marshal(good); err == nil {
		_ = bson.Unmarshal(b, out)
	}
	if len(probs) == 0 { // not reached when every field decodes alone
		probs = []*Problem{{WholeDocument, fmt.Sprintf("cannot be decoded: %v", err)}}
	}
	return probs
}

// DateProblem says what is wrong with a field that queries compare with
// dates (a string or number there decodes, but sorts apart from dates and
// matches no date range), or nil for a date.
func DateProblem(raw bson.Raw, field string) *Problem {
	v := raw.Lookup(field)
	switch v.Type {
	case bson.TypeDateTime:
		return nil
	case 0, bson.TypeNull:
		return &Problem{field, "is missing"}
	}
	return &Problem{field, fmt.Sprintf("must be %s, got %s", DescribeType(timeType), DescribeValue(v))}
}

// DescribeType names a Go field type as the BSON value it needs.
func DescribeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Map:
		return "a document of " + strings.TrimPrefix(DescribeType(t.Elem()), "a ") + "s"
	case reflect.Pointer:
		return DescribeType(t.Elem())
	case reflect.Struct:
		if t == rawValueType {
			return "any value"
		}
		if t == timeType {
			return "a date"
		}
		return "a document"
	}
	return t.String()
}

// DescribeValue shows a stored value briefly, for a message.
// A value edited into megabytes is not formatted whole.
func DescribeValue(v bson.RawValue) string {
	const shown = 40
	if len(v.Value) > 4*shown {
		if str, ok := v.StringValueOK(); ok {
			return fmt.Sprintf("%s %q… (%d bytes)", v.Type, strings.ToValidUTF8(str[:shown], ""), len(str))
		}
		return fmt.Sprintf("%s of %d bytes", v.Type, len(v.Value))
	}
	s := v.String()
	if len(s) > shown {
		s = s[:shown] + "…"
	}
	return fmt.Sprintf("%s %s", v.Type, s)
}
