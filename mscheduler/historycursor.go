package mscheduler

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A cursor of Runs is the position of the last record of a page in the
// order of Runs (finished descending, then _id descending), as stored.
// For a sound record, a date and a string run id, it is the finish time
// in milliseconds and the run id, and the next page's filter is the one
// Runs always used. For a record edited by hand into another shape it
// carries the raw values, and the next page's filter also reads on into
// the type brackets that sort after them, so that paging neither skips
// nor repeats a record. (A record with exactly a sound record's finish
// time and an _id sorting below strings, a number, is not reached past
// that record.)
type runPos struct {
	finished bson.RawValue // null when missing: a missing field sorts as null
	id       bson.RawValue
}

// sound reports a position of a date and a string run id.
func (p runPos) sound() bool {
	return p.finished.Type == bson.TypeDateTime && p.id.Type == bson.TypeString
}

func posOf(raw bson.Raw) runPos {
	pos := runPos{finished: raw.Lookup("finished"), id: raw.Lookup(fID)}
	if pos.finished.Type == 0 || pos.finished.Type == bson.TypeUndefined {
		pos.finished = bson.RawValue{Type: bson.TypeNull}
	}
	return pos
}

// after selects the records after p, as the branches of an $or.
func (p runPos) after() bson.A {
	if p.sound() {
		return bson.A{
			bson.D{{Key: "finished", Value: op("$lt", p.finished)}},
			bson.D{{Key: "finished", Value: p.finished}, {Key: fID, Value: op("$lt", p.id)}},
		}
	}
	rank := rankOf(p.finished.Type)
	var or bson.A
	if rank > rankNull && p.finished.Type != bson.TypeRegex { // a regex cannot be compared by $lt
		or = append(or, bson.D{{Key: "finished", Value: op("$lt", p.finished)}})
	}
	same := op("$eq", p.finished) // $eq: a regex is compared, not matched; null also matches a missing field
	or = append(or, bson.D{{Key: "finished", Value: same}, {Key: fID, Value: op("$lt", p.id)}})
	if below := typesBelow(rankOf(p.id.Type)); len(below) > 0 {
		or = append(or, bson.D{{Key: "finished", Value: same}, {Key: fID, Value: op("$type", below)}})
	}
	return append(or, belowBracket(rank)...)
}

// The sort order of BSON types (MongoDB's, which the development server
// follows); arrays sort by their elements.
const (
	rankMinKey = iota
	rankNull   // and missing, undefined
	rankNumber
	rankString
	rankObject
	rankArray
	rankBinary
	rankObjectID
	rankBool
	rankDate
	rankTimestamp
	rankRegex
	rankOther // DBPointer, JavaScript
	rankMaxKey
)

func rankOf(t bson.Type) int {
	switch t {
	case bson.TypeMinKey:
		return rankMinKey
	case 0, bson.TypeUndefined, bson.TypeNull:
		return rankNull
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128:
		return rankNumber
	case bson.TypeString, bson.TypeSymbol:
		return rankString
	case bson.TypeEmbeddedDocument:
		return rankObject
	case bson.TypeArray:
		return rankArray
	case bson.TypeBinary:
		return rankBinary
	case bson.TypeObjectID:
		return rankObjectID
	case bson.TypeBoolean:
		return rankBool
	case bson.TypeDateTime:
		return rankDate
	case bson.TypeTimestamp:
		return rankTimestamp
	case bson.TypeRegex:
		return rankRegex
	case bson.TypeMaxKey:
		return rankMaxKey
	}
	return rankOther
}

// typeAliases are the $type aliases (known to MongoDB and the development
// server) of the brackets a record may sort in, null and arrays aside.
var typeAliases = []struct {
	rank  int
	alias string
}{
	{rankNumber, "number"}, {rankString, "string"}, {rankObject, "object"}, {rankBinary, "binData"},
	{rankObjectID, "objectId"}, {rankBool, "bool"}, {rankDate, "date"}, {rankTimestamp, "timestamp"}, {rankRegex, "regex"},
}

// typesBelow are the $type aliases of the brackets below rank, null
// included.
func typesBelow(rank int) bson.A {
	var out bson.A
	if rank > rankNull {
		out = append(out, "null")
	}
	for _, a := range typeAliases {
		if a.rank < rank {
			out = append(out, a.alias)
		}
	}
	return out
}

// belowBracket selects, as the branches of an $or, the records whose
// finished sorts in a bracket below rank, a missing one included.
func belowBracket(rank int) bson.A {
	if rank <= rankNull {
		return nil
	}
	or := bson.A{bson.D{{Key: "finished", Value: nil}}}
	if below := typesBelow(rank)[1:]; len(below) > 0 {
		or = append(or, bson.D{{Key: "finished", Value: op("$type", below)}})
	}
	return or
}

// rawCursor marks a cursor that carries raw values.
const rawCursor = '~'

func encodeCursor(p runPos) string {
	if p.sound() {
		return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.finished.DateTime(), 10) + ":" + p.id.StringValue()))
	}
	b, err := bson.Marshal(bson.D{{Key: "f", Value: p.finished}, {Key: "i", Value: p.id}})
	if err != nil { // raw values read from the server always marshal
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(append([]byte{rawCursor}, b...))
}

func decodeCursor(s string) (runPos, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return runPos{}, err
	}
	if len(b) > 0 && b[0] == rawCursor {
		doc := bson.Raw(b[1:])
		if err := doc.Validate(); err != nil {
			return runPos{}, errors.New("malformed")
		}
		p := runPos{finished: doc.Lookup("f"), id: doc.Lookup("i")}
		if p.finished.Type == 0 || p.id.Type == 0 {
			return runPos{}, errors.New("malformed")
		}
		return p, nil
	}
	ms, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return runPos{}, errors.New("malformed")
	}
	return runPos{finished: rawValue(time.UnixMilli(n).UTC()), id: rawValue(id)}, nil
}

func rawValue(v any) bson.RawValue {
	t, b, _ := bson.MarshalValue(v) // a time or a string
	return bson.RawValue{Type: t, Value: b}
}
