package mscheduler

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// unstorableKey finds, in encoded params, a field name the task document
// cannot hold on every server: one that starts with $ (an operator to an
// update, refused or taken as one depending on the server and the
// command) or holds a dot (a path to an update). It returns the path to
// it, as Params' own field would name it (["a"]["$b"], [2]), or "".
func unstorableKey(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil {
			return ""
		}
		for _, e := range elems {
			step := fmt.Sprintf("[%q]", e.Key())
			if strings.HasPrefix(e.Key(), "$") || strings.Contains(e.Key(), ".") {
				return step
			}
			if inner := unstorableKey(e.Value()); inner != "" {
				return step + inner
			}
		}
	case bson.TypeArray:
		values, err := v.Array().Values()
		if err != nil {
			return ""
		}
		for i, item := range values {
			if inner := unstorableKey(item); inner != "" {
				return fmt.Sprintf("[%d]", i) + inner
			}
		}
	}
	return ""
}
