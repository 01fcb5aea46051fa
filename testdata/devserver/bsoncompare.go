package main

import (
	"bytes"
	"cmp"
	"math"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// typeBracket orders BSON types as MongoDB compares them; $gt and the like only match values of
// the same bracket (numbers of any type are one bracket).
func typeBracket(t bson.Type) int {
	switch t {
	case bson.TypeMinKey:
		return 1
	case bson.TypeNull, bson.TypeUndefined:
		return 2
	case bson.TypeDouble, bson.TypeInt32, bson.TypeInt64, bson.TypeDecimal128:
		return 3
	case bson.TypeString, bson.TypeSymbol:
		return 4
	case bson.TypeEmbeddedDocument:
		return 5
	case bson.TypeArray:
		return 6
	case bson.TypeBinary:
		return 7
	case bson.TypeObjectID:
		return 8
	case bson.TypeBoolean:
		return 9
	case bson.TypeDateTime:
		return 10
	case bson.TypeTimestamp:
		return 11
	case bson.TypeRegex:
		return 12
	case bson.TypeMaxKey:
		return 14
	}
	return 13
}

func equalValues(a, b bson.RawValue) bool {
	c, ok := compareValues(a, b)
	return ok && c == 0
}

// compareValues compares two values of one type bracket; ok is false across brackets.
func compareValues(a, b bson.RawValue) (c int, ok bool) {
	ba, bb := typeBracket(a.Type), typeBracket(b.Type)
	if ba != bb {
		return 0, false
	}
	switch ba {
	case 1, 2, 14:
		return 0, true
	case 3:
		return compareNumbers(a, b), true
	case 4:
		return cmp.Compare(stringOf(a), stringOf(b)), true
	case 5:
		return compareDocuments(a.Document(), b.Document()), true
	case 6:
		return compareArrays(a.Array(), b.Array()), true
	case 8:
		return bytes.Compare(a.Value, b.Value), true
	case 9:
		return cmp.Compare(boolInt(a.Boolean()), boolInt(b.Boolean())), true
	case 10:
		return cmp.Compare(a.DateTime(), b.DateTime()), true
	case 11:
		at, ai := a.Timestamp()
		bt, bi := b.Timestamp()
		return bson.Timestamp{T: at, I: ai}.Compare(bson.Timestamp{T: bt, I: bi}), true
	case 7:
		if c := cmp.Compare(len(a.Value), len(b.Value)); c != 0 {
			return c, true
		}
	}
	if a.Type != b.Type {
		return 0, false
	}
	return bytes.Compare(a.Value, b.Value), true
}

func compareNumbers(a, b bson.RawValue) int {
	ia, aInt := intOf(a)
	ib, bInt := intOf(b)
	if aInt && bInt {
		return cmp.Compare(ia, ib)
	}
	return cmp.Compare(floatOf(a), floatOf(b))
}

func intOf(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case bson.TypeInt64:
		return v.Int64(), true
	}
	return 0, false
}

func floatOf(v bson.RawValue) float64 {
	if v.Type == bson.TypeDecimal128 {
		f, err := strconv.ParseFloat(v.Decimal128().String(), 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	f, _ := v.AsFloat64OK()
	return f
}

func stringOf(v bson.RawValue) string {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	s, _ := v.SymbolOK()
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compareDocuments compares field by field: names, then values.
func compareDocuments(a, b bson.Raw) int {
	ea, _ := a.Elements()
	eb, _ := b.Elements()
	for i := 0; i < len(ea) && i < len(eb); i++ {
		va, vb := ea[i].Value(), eb[i].Value()
		if c := cmp.Compare(typeBracket(va.Type), typeBracket(vb.Type)); c != 0 {
			return c
		}
		if c := cmp.Compare(ea[i].Key(), eb[i].Key()); c != 0 {
			return c
		}
		if c, _ := compareValues(va, vb); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(ea), len(eb))
}

func compareArrays(a, b bson.RawArray) int {
	va, _ := a.Values()
	vb, _ := b.Values()
	for i := 0; i < len(va) && i < len(vb); i++ {
		if c := cmp.Compare(typeBracket(va[i].Type), typeBracket(vb[i].Type)); c != 0 {
			return c
		}
		if c, _ := compareValues(va[i], vb[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(va), len(vb))
}
