package gateway

// Contract tests of openapi.json: the document lists exactly the routes of
// Routes, its schemas have exactly the JSON fields of the Go request and
// response types, and the answers the gateway gives are the documented
// ones, in status and in shape.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// oaDoc is the parsed document.
type oaDoc map[string]any

func loadOA(t *testing.T) oaDoc {
	t.Helper()
	var doc oaDoc
	dec := json.NewDecoder(bytes.NewReader(openAPI))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if dec.More() {
		t.Fatal("openapi.json holds more than one JSON value")
	}
	return doc
}

// oaObj walks the document by keys; nil when a key is missing.
func oaObj(v any, keys ...string) map[string]any {
	if d, ok := v.(oaDoc); ok {
		v = map[string]any(d)
	}
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	m, _ := v.(map[string]any)
	return m
}

// resolve follows a local $ref.
func (d oaDoc) resolve(t *testing.T, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	for range 10 {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("$ref %q is not local", ref)
		}
		var cur any = map[string]any(d)
		for _, part := range strings.Split(ref[2:], "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			cm, _ := cur.(map[string]any)
			if _, ok := cm[part]; !ok {
				t.Fatalf("$ref %q does not resolve", ref)
			}
			cur = cm[part]
		}
		m, _ = cur.(map[string]any)
	}
	t.Fatalf("$ref chain too long at %v", m)
	return nil
}

func (d oaDoc) schema(t *testing.T, name string) map[string]any {
	t.Helper()
	s := oaObj(d, "components", "schemas", name)
	if s == nil {
		t.Fatalf("components/schemas has no %s", name)
	}
	return s
}

var oaMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations are the document's operations by "METHOD path".
func (d oaDoc) operations() map[string]map[string]any {
	out := map[string]map[string]any{}
	for path, item := range oaObj(d, "paths") {
		for _, m := range oaMethods {
			if op := oaObj(item, m); op != nil {
				out[strings.ToUpper(m)+" "+path] = op
			}
		}
	}
	return out
}

func oaRouteIDs() []string {
	var out []string
	for _, r := range Routes {
		out = append(out, r.Method+" "+r.Pattern)
	}
	sort.Strings(out)
	return out
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadOA(t)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.") {
		t.Errorf("openapi = %q, want 3.x", v)
	}
	if oaObj(doc, "info")["title"] == nil || oaObj(doc, "info")["version"] == nil {
		t.Error("info needs a title and a version")
	}
	ops := doc.operations()
	if got, want := slices.Sorted(maps.Keys(ops)), oaRouteIDs(); !slices.Equal(got, want) {
		t.Errorf("documented operations differ from Routes:\n got %q\nwant %q", got, want)
	}
	if oaObj(doc, "components", "securitySchemes", "bearer")["scheme"] != "bearer" {
		t.Error("no bearer security scheme")
	}
	// The token is optional: a gateway without tokens serves loopback.
	sec, _ := doc["security"].([]any)
	if !slices.ContainsFunc(sec, func(s any) bool { m, _ := s.(map[string]any); return len(m) == 0 }) ||
		!slices.ContainsFunc(sec, func(s any) bool { return oaObj(s)["bearer"] != nil }) {
		t.Errorf("security = %v, want bearer or nothing", sec)
	}
	wildcard := regexp.MustCompile(`\{([^}.]+)(\.\.\.)?\}`)
	ids := map[string]string{}
	for id, op := range ops {
		method, path, _ := strings.Cut(id, " ")
		opID, _ := op["operationId"].(string)
		if opID == "" {
			t.Errorf("%s has no operationId", id)
		} else if other, dup := ids[opID]; dup {
			t.Errorf("operationId %q of %s is also %s's", opID, id, other)
		}
		ids[opID] = id
		if d, _ := op["description"].(string); len(d) < 20 {
			t.Errorf("%s has no description", id)
		}
		// Path parameters: exactly the pattern's wildcards, required.
		var want []string
		for _, m := range wildcard.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
		}
		var got []string
		params, _ := oaObj(doc, "paths", path)["parameters"].([]any)
		opParams, _ := op["parameters"].([]any)
		for _, p := range append(slices.Clone(params), opParams...) {
			p := doc.resolve(t, p)
			if p["in"] == "path" {
				got = append(got, p["name"].(string))
				if p["required"] != true {
					t.Errorf("%s: path parameter %v is not required", id, p["name"])
				}
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: path parameters %q, want %q", id, got, want)
		}
		// Responses: a 200, each code described, every error an errorJSON
		// (renew's 409 lists the runs lost instead).
		resps := oaObj(op, "responses")
		if resps["200"] == nil {
			t.Errorf("%s has no 200 response", id)
		}
		for code, r := range resps {
			r := doc.resolve(t, r)
			if d, _ := r["description"].(string); d == "" {
				t.Errorf("%s %s has no description", id, code)
			}
			s := doc.resolve(t, oaObj(r, "content", "application/json")["schema"])
			if s == nil {
				t.Errorf("%s %s has no application/json schema", id, code)
				continue
			}
			n, _ := strconv.Atoi(code)
			isErr := n >= 400 && !(id == "POST /v1/collections/{collection}/renew" && n == 409)
			if isErr != reflect.DeepEqual(s, doc.schema(t, "errorJSON")) {
				t.Errorf("%s %s: errorJSON is the schema of errors, and of errors only", id, code)
			}
		}
		// Every route but the document is guarded the same way.
		if path != "/openapi.json" {
			for _, code := range []string{"401", "403", "413", "421", "500"} {
				if resps[code] == nil {
					t.Errorf("%s does not document %s", id, code)
				}
			}
		}
		if rb := oaObj(op, "requestBody"); rb != nil && method == "POST" && resps["415"] == nil {
			t.Errorf("%s takes a body but does not document 415", id)
		}
	}
	// Every $ref anywhere resolves.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["$ref"]; ok {
				doc.resolve(t, v)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(map[string]any(doc))
}

// oaField is a field of a Go type as encoding/json sees it.
type oaField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// oaJSONFields lists the JSON fields of a struct type, with those of its
// embedded structs.
func oaJSONFields(t reflect.Type) []oaField {
	var out []oaField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && !hasTag && f.Type.Kind() == reflect.Struct {
			out = append(out, oaJSONFields(f.Type)...)
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, oaField{name, f.Type, slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

// properties are a schema's properties, those of all its oneOf
// alternatives for a oneOf.
func (d oaDoc) properties(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	if alts, ok := s["oneOf"].([]any); ok {
		out := map[string]any{}
		for _, a := range alts {
			maps.Copy(out, d.properties(t, d.resolve(t, a)))
		}
		return out
	}
	return oaObj(s, "properties")
}

var (
	oaRawMessage = reflect.TypeFor[json.RawMessage]()
	oaTime       = reflect.TypeFor[time.Time]()
)

// checkType says what is wrong with the schema of a field of Go type typ.
func (d oaDoc) checkType(t *testing.T, typ reflect.Type, s map[string]any) string {
	t.Helper()
	s = d.resolve(t, s)
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == oaRawMessage:
		if s["type"] != nil {
			return fmt.Sprintf("type %v, want none: any JSON value", s["type"])
		}
		return ""
	case typ == oaTime:
		if s["type"] != "string" || s["format"] != "date-time" {
			return fmt.Sprintf("type %v format %v, want string date-time", s["type"], s["format"])
		}
		return ""
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
	case typ.Kind() == reflect.Slice:
		if s["type"] != "array" {
			return fmt.Sprintf("type %v, want array", s["type"])
		}
		if msg := d.checkType(t, typ.Elem(), oaObj(s, "items")); msg != "" {
			return "items: " + msg
		}
		return ""
	case typ.Kind() == reflect.Map:
		if s["type"] != "object" {
			return fmt.Sprintf("type %v, want object", s["type"])
		}
		if msg := d.checkType(t, typ.Elem(), oaObj(s, "additionalProperties")); msg != "" {
			return "additionalProperties: " + msg
		}
		return ""
	case typ.Kind() == reflect.Struct:
		// A nested type of the API: its own schema, checked by name.
		if s["type"] != "object" || s["properties"] == nil {
			return fmt.Sprintf("type %v, want an object schema", s["type"])
		}
		return ""
	default:
		return fmt.Sprintf("no schema rule for Go type %s", typ)
	}
	if s["type"] != want {
		return fmt.Sprintf("type %v, want %s", s["type"], want)
	}
	return ""
}

// oaTypes are the Go types of request and response bodies, by schema
// name. Requests are decoded refusing unknown fields.
var oaTypes = []struct {
	schema  string
	typ     reflect.Type
	request bool
}{
	{"taskIn", reflect.TypeFor[taskIn](), true},
	{"publishIn", reflect.TypeFor[publishIn](), true},
	{"takeIn", reflect.TypeFor[takeIn](), true},
	{"renewIn", reflect.TypeFor[renewIn](), true},
	{"endIn", reflect.TypeFor[endIn](), true},
	{"runOut", reflect.TypeFor[runOut](), false},
	{"taskOut", reflect.TypeFor[taskOut](), false},
	{"runOutcome", reflect.TypeFor[runOutcome](), false},
	{"publishOut", reflect.TypeFor[publishOut](), false},
	{"lostRun", reflect.TypeFor[lostRun](), false},
	{"errorJSON", reflect.TypeFor[errorJSON](), false},
}

func TestContractSchemasMatchStructs(t *testing.T) {
	doc := loadOA(t)
	for _, at := range oaTypes {
		t.Run(at.schema, func(t *testing.T) {
			s := doc.schema(t, at.schema)
			props := doc.properties(t, s)
			fields := oaJSONFields(at.typ)
			var names, required []string
			for _, f := range fields {
				names = append(names, f.name)
				if !f.omitempty {
					required = append(required, f.name)
				}
				p, ok := props[f.name]
				if !ok {
					continue
				}
				if _, isOneOf := s["oneOf"]; isOneOf && f.name != "tasks" {
					continue // publishIn: the fields of taskIn, checked there
				}
				if msg := doc.checkType(t, f.typ, oaObj(p)); msg != "" {
					t.Errorf("%s.%s: %s", at.schema, f.name, msg)
				}
			}
			sort.Strings(names)
			if got := slices.Sorted(maps.Keys(props)); !slices.Equal(got, names) {
				t.Errorf("schema %s has the properties\n %q\nbut %s has the JSON fields\n %q", at.schema, got, at.typ, names)
			}
			alts := []map[string]any{s}
			if oneOf, ok := s["oneOf"].([]any); ok {
				alts = nil
				for _, a := range oneOf {
					alts = append(alts, doc.resolve(t, a))
				}
			}
			for _, a := range alts {
				if at.request && a["additionalProperties"] != false {
					t.Errorf("%s: a request schema must say additionalProperties: false, as the gateway refuses unknown fields", at.schema)
				}
				req, _ := a["required"].([]any)
				for _, r := range req {
					if oaObj(a, "properties")[r.(string)] == nil {
						t.Errorf("%s: required %v is not a property", at.schema, r)
					}
				}
			}
			if !at.request {
				// A response field without omitempty is always there.
				got := []string{}
				req, _ := s["required"].([]any)
				for _, r := range req {
					got = append(got, r.(string))
				}
				sort.Strings(got)
				sort.Strings(required)
				if !slices.Equal(got, required) {
					t.Errorf("%s: required %q, want the fields without omitempty %q", at.schema, got, required)
				}
			}
		})
	}
}

// TestContractRouteBodies checks which schema each route takes and
// answers, and which fields of endIn each end route takes.
func TestContractRouteBodies(t *testing.T) {
	doc := loadOA(t)
	ops := doc.operations()
	for _, c := range []struct {
		route, in, out string
	}{
		{"POST /v1/collections/{collection}/tasks", "publishIn", "publishResults"},
		{"GET /v1/collections/{collection}/tasks", "", "taskList"},
		{"GET /v1/collections/{collection}/tasks/{key}", "", "taskOut"},
		{"POST /v1/collections/{collection}/tasks/{key}/cancel", "", "cancelOut"},
		{"POST /v1/collections/{collection}/take", "takeIn", "takeOut"},
		{"POST /v1/collections/{collection}/renew", "renewIn", "renewOut"},
		{"POST /v1/collections/{collection}/complete", "completeIn", "endOut"},
		{"POST /v1/collections/{collection}/fail", "failIn", "endOut"},
		{"POST /v1/collections/{collection}/release", "releaseIn", "endOut"},
	} {
		op := ops[c.route]
		if op == nil {
			t.Errorf("%s is not documented", c.route)
			continue
		}
		in := oaObj(op, "requestBody", "content", "application/json", "schema")
		switch {
		case c.in == "" && op["requestBody"] != nil:
			t.Errorf("%s documents a body it does not read", c.route)
		case c.in != "" && (in["$ref"] != "#/components/schemas/"+c.in || oaObj(op, "requestBody")["required"] != true):
			t.Errorf("%s: body %v, want the required %s", c.route, in["$ref"], c.in)
		}
		out := doc.resolve(t, oaObj(op, "responses", "200"))
		if ref := oaObj(out, "content", "application/json", "schema")["$ref"]; ref != "#/components/schemas/"+c.out {
			t.Errorf("%s: 200 answers %v, want %s", c.route, ref, c.out)
		}
	}
	// The end routes: complete takes a result, fail an error and retry,
	// release neither; each a part of endIn, with the same definitions.
	endIn := doc.properties(t, doc.schema(t, "endIn"))
	for name, want := range map[string][]string{
		"completeIn": {"attempt", "executor", "result", "run_id"},
		"failIn":     {"attempt", "error", "executor", "retry", "run_id"},
		"releaseIn":  {"attempt", "executor", "run_id"},
	} {
		s := doc.schema(t, name)
		props := doc.properties(t, s)
		if got := slices.Sorted(maps.Keys(props)); !slices.Equal(got, want) {
			t.Errorf("%s has %q, want %q", name, got, want)
		}
		for k, p := range props {
			if !reflect.DeepEqual(p, endIn[k]) {
				t.Errorf("%s.%s differs from endIn.%s", name, k, k)
			}
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s must refuse other fields", name)
		}
	}
	if d := oaObj(doc.schema(t, "endIn"), "properties", "retry")["default"]; d != true {
		t.Errorf("endIn.retry default %v, want true", d)
	}
	// The inline answers: their keys are those the handlers write.
	for name, want := range map[string][]string{
		"publishResults": {"results"}, "taskList": {"tasks"}, "cancelOut": {"key", "status"},
		"takeOut": {"runs"}, "renewOut": {"lost", "renewed"}, "endOut": {"outcome", "run_id"},
	} {
		if got := slices.Sorted(maps.Keys(doc.properties(t, doc.schema(t, name)))); !slices.Equal(got, want) {
			t.Errorf("%s has %q, want %q", name, got, want)
		}
	}
}

func oaEnum(s map[string]any) []string {
	var out []string
	e, _ := s["enum"].([]any)
	for _, v := range e {
		out = append(out, v.(string))
	}
	sort.Strings(out)
	return out
}

func TestContractEnums(t *testing.T) {
	doc := loadOA(t)
	var wantStatuses []string
	for _, s := range statuses {
		wantStatuses = append(wantStatuses, string(s))
	}
	sort.Strings(wantStatuses)
	list := doc.operations()["GET /v1/collections/{collection}/tasks"]
	params := map[string]map[string]any{}
	listParams, _ := list["parameters"].([]any)
	for _, p := range listParams {
		p := doc.resolve(t, p)
		if p["in"] == "query" {
			params[p["name"].(string)] = p
		}
	}
	if got := slices.Sorted(maps.Keys(params)); !slices.Equal(got, []string{"after", "group", "limit", "status", "tag"}) {
		t.Errorf("list's query parameters are %q", got)
	}
	for _, name := range []string{"status", "tag"} {
		if p := params[name]; oaObj(p, "schema")["type"] != "array" || p["explode"] != true {
			t.Errorf("list's %s must be a repeatable (exploded array) parameter", name)
		}
	}
	if got := oaEnum(oaObj(params["status"], "schema", "items")); !slices.Equal(got, wantStatuses) {
		t.Errorf("list's status enum %q, want %q", got, wantStatuses)
	}
	limit := oaObj(params["limit"], "schema")
	if limit["type"] != "integer" || limit["minimum"] != json.Number("1") || limit["maximum"] != json.Number(strconv.Itoa(listLimitMax)) ||
		limit["default"] != json.Number(strconv.Itoa(mscheduler.ListLimitDefault)) {
		t.Errorf("list's limit schema %v, want integer 1..%d, default %d", limit, listLimitMax, mscheduler.ListLimitDefault)
	}
	if got := oaEnum(oaObj(doc.schema(t, "taskOut"), "properties", "status")); !slices.Equal(got, wantStatuses) {
		t.Errorf("taskOut.status enum %q, want %q", got, wantStatuses)
	}
	wantEnds := []string{"pending"}
	for _, o := range endOutcomes {
		wantEnds = append(wantEnds, o)
	}
	sort.Strings(wantEnds)
	if got := oaEnum(oaObj(doc.schema(t, "endOut"), "properties", "outcome")); !slices.Equal(got, wantEnds) {
		t.Errorf("endOut.outcome enum %q, want %q", got, wantEnds)
	}
	wantPublish := []string{string(mscheduler.PublishInserted), string(mscheduler.PublishUnchanged), string(mscheduler.PublishUpdated)}
	if got := oaEnum(oaObj(doc.schema(t, "publishOut"), "properties", "outcome")); !slices.Equal(got, wantPublish) {
		t.Errorf("publishOut.outcome enum %q, want %q", got, wantPublish)
	}
	wantRuns := []string{}
	for _, o := range []mscheduler.Outcome{mscheduler.OutcomeSucceeded, mscheduler.OutcomeFailed, mscheduler.OutcomeExpired,
		mscheduler.OutcomeReleased, mscheduler.OutcomeCancelled, mscheduler.OutcomeRevoked, mscheduler.OutcomeUnknown} {
		wantRuns = append(wantRuns, string(o))
	}
	sort.Strings(wantRuns)
	if got := oaEnum(oaObj(doc.schema(t, "runOutcome"), "properties", "outcome")); !slices.Equal(got, wantRuns) {
		t.Errorf("runOutcome.outcome enum %q, want %q", got, wantRuns)
	}
}

// validate says how v (decoded with UseNumber) differs from schema s.
func (d oaDoc) validate(t *testing.T, s map[string]any, v any, at string) []string {
	t.Helper()
	s = d.resolve(t, s)
	if alts, ok := s["oneOf"].([]any); ok {
		n := 0
		for _, a := range alts {
			if len(d.validate(t, oaObj(a), v, at)) == 0 {
				n++
			}
		}
		if n != 1 {
			return []string{fmt.Sprintf("%s: matches %d of oneOf, want 1", at, n)}
		}
		return nil
	}
	if v == nil {
		if s["type"] != nil && s["nullable"] != true {
			return []string{at + ": null, not nullable"}
		}
		return nil
	}
	if e, ok := s["enum"].([]any); ok && !slices.Contains(e, v) {
		return []string{fmt.Sprintf("%s: %v is not one of %v", at, v, e)}
	}
	var errs []string
	switch s["type"] {
	case nil:
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want an object", at, v)}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: no %v", at, r))
			}
		}
		props := oaObj(s, "properties")
		for k, x := range m {
			switch p, ok := props[k]; {
			case ok:
				errs = append(errs, d.validate(t, oaObj(p), x, at+"."+k)...)
			case s["additionalProperties"] == false:
				errs = append(errs, fmt.Sprintf("%s: %s is not documented", at, k))
			case oaObj(s, "additionalProperties") != nil:
				errs = append(errs, d.validate(t, oaObj(s, "additionalProperties"), x, at+"."+k)...)
			case props != nil:
				errs = append(errs, fmt.Sprintf("%s: %s is not documented", at, k))
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want an array", at, v)}
		}
		for i, x := range a {
			errs = append(errs, d.validate(t, oaObj(s, "items"), x, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return []string{fmt.Sprintf("%s: %T, want a string", at, v)}
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %q is not a date-time", at, str))
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			return []string{fmt.Sprintf("%s: %v, want an integer", at, v)}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return []string{fmt.Sprintf("%s: %T, want a boolean", at, v)}
		}
	default:
		errs = append(errs, fmt.Sprintf("%s: no rule for type %v", at, s["type"]))
	}
	return errs
}

// oaClient sends requests to a gateway's ServeHTTP, as a peer on this
// machine, and checks each answer against the document.
type oaClient struct {
	t    *testing.T
	doc  oaDoc
	ops  map[string]map[string]any
	gw   *Gateway
	coll string
	seen map[string]bool // "route status" answered
}

func newOAClient(t *testing.T, gw *Gateway, coll string) *oaClient {
	doc := loadOA(t)
	return &oaClient{t: t, doc: doc, ops: doc.operations(), gw: gw, coll: coll, seen: map[string]bool{}}
}

// do sends body (JSON-encoded unless a string) to the route, with its
// {collection} and {key} filled, and returns the status and the answer.
func (c *oaClient) do(route, key, query string, body any, edit func(*http.Request)) (int, map[string]any) {
	c.t.Helper()
	method, pattern, _ := strings.Cut(route, " ")
	path := strings.ReplaceAll(pattern, "{collection}", url.PathEscape(c.coll))
	path = strings.ReplaceAll(path, "{key}", url.PathEscape(key))
	if query != "" {
		path += "?" + query
	}
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequestWithContext(c.t.Context(), method, path, rd)
	req.Host = "127.0.0.1"
	req.RemoteAddr = "127.0.0.1:40000"
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if edit != nil {
		edit(req)
	}
	w := httptest.NewRecorder()
	c.gw.ServeHTTP(w, req)
	code := w.Code
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		c.t.Errorf("%s: Content-Type %q", route, ct)
	}
	var out any
	dec := json.NewDecoder(w.Body)
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		c.t.Fatalf("%s: %d, the answer is not JSON: %v", route, code, err)
	}
	op := c.ops[route]
	if op == nil {
		c.t.Fatalf("%s is not documented", route)
	}
	r := oaObj(op, "responses")[strconv.Itoa(code)]
	if r == nil {
		c.t.Errorf("%s answered %d, which it does not document: %v", route, code, out)
	} else {
		s := oaObj(c.doc.resolve(c.t, r), "content", "application/json", "schema")
		for _, e := range c.doc.validate(c.t, s, out, fmt.Sprintf("%s %d", route, code)) {
			c.t.Errorf("%s (answer %v)", e, out)
		}
	}
	c.seen[fmt.Sprintf("%s %d", route, code)] = true
	m, _ := out.(map[string]any)
	return code, m
}

// expect sends a request and fails unless the answer has the status and,
// for an error, names the field.
func (c *oaClient) expect(code int, field, route, key, query string, body any, edit func(*http.Request)) map[string]any {
	c.t.Helper()
	got, out := c.do(route, key, query, body, edit)
	if got != code {
		c.t.Fatalf("%s %s %v: %d %v, want %d", route, key, body, got, out, code)
	}
	if field != "" && out["field"] != field {
		c.t.Errorf("%s %v: field %v, want %q (%v)", route, body, out["field"], field, out["error"])
	}
	return out
}

const (
	opPublish  = "POST /v1/collections/{collection}/tasks"
	opList     = "GET /v1/collections/{collection}/tasks"
	opGet      = "GET /v1/collections/{collection}/tasks/{key}"
	opCancel   = "POST /v1/collections/{collection}/tasks/{key}/cancel"
	opTake     = "POST /v1/collections/{collection}/take"
	opRenew    = "POST /v1/collections/{collection}/renew"
	opComplete = "POST /v1/collections/{collection}/complete"
	opFail     = "POST /v1/collections/{collection}/fail"
	opRelease  = "POST /v1/collections/{collection}/release"
	opOpenAPI  = "GET /openapi.json"
)

// newOAGateway is a gateway serving collections ("c" when none is named).
func newOAGateway(t *testing.T, cfg *Config, collections ...string) *Gateway {
	t.Helper()
	if cfg == nil {
		cfg = &Config{}
	}
	cfg.Collections = append(collections, "c")
	gw, err := New(mschedulertest.Client().Database(mschedulertest.Database), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Stop(ctx)
	})
	return gw
}

func TestOpenAPIServed(t *testing.T) {
	gw := newOAGateway(t, nil)
	get := func(host, remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/openapi.json", nil)
		req.Host, req.RemoteAddr = host, remote
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, req)
		return w
	}
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, remote := range []string{"127.0.0.1:40000", "[::1]:40000", "192.0.2.7:40000"} {
		// The document needs no token: it is served to peers that are
		// not on this machine too, as its empty security says.
		w := get("127.0.0.1", remote)
		if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("from %s: %d %q", remote, w.Code, w.Header().Get("Content-Type"))
		}
		if !bytes.Equal(w.Body.Bytes(), openAPI) || !bytes.Equal(w.Body.Bytes(), onDisk) {
			t.Errorf("from %s: the document served differs from openapi.json", remote)
		}
	}
	if sec, ok := oaObj(loadOA(t), "paths", "/openapi.json", "get")["security"].([]any); !ok || len(sec) != 0 {
		t.Errorf("GET /openapi.json must document security: [], got %v", sec)
	}
	if w := get("rebind.example", "127.0.0.1:40000"); w.Code != http.StatusMisdirectedRequest {
		t.Errorf("Host rebind.example: %d, want 421", w.Code)
	}
}

// TestContractAnswers exercises every documented answer of every route but
// those no request can bring about in a test (see unexercised), and checks
// each answer against the document: the guard's answers first, then a
// run through a gateway on a real collection.
func TestContractAnswers(t *testing.T) {
	seen := map[string]bool{}
	t.Run("guard", func(t *testing.T) { contractGuardAnswers(t, seen) })
	t.Run("runs", func(t *testing.T) { contractRunAnswers(t, seen) })
	var missing []string
	for route, op := range loadOA(t).operations() {
		for code := range oaObj(op, "responses") {
			answer := route + " " + code
			if !seen[answer] && unexercised[code] == "" {
				missing = append(missing, answer)
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("documented answers no request of the test brought about:\n%s", strings.Join(missing, "\n"))
	}
}

// unexercised are the documented answers no test request brings about,
// and why.
var unexercised = map[string]string{
	"500": "an error of the gateway itself, which no request is meant to cause",
	"503": "the MongoDB server unreachable or too slow, or the gateway stopping mid-request",
}

// contractGuardAnswers checks the answers given before any database work.
func contractGuardAnswers(t *testing.T, seen map[string]bool) {
	open := newOAClient(t, newOAGateway(t, &Config{MaxBodyBytes: 1 << 10}), "c")
	open.seen = seen
	for _, route := range oaRouteIDs() {
		if route == opOpenAPI {
			continue
		}
		open.expect(421, "host", route, "k", "", nil, func(r *http.Request) { r.Host = "rebind.example:8080" })
		open.expect(403, "token", route, "k", "", nil, func(r *http.Request) { r.RemoteAddr = "192.0.2.7:40000" })
		open.expect(413, "body", route, "k", "", strings.Repeat(" ", 2<<10)+"{}", nil)
	}
	open.expect(421, "host", opOpenAPI, "", "", nil, func(r *http.Request) { r.Host = "rebind.example" })
	open.expect(413, "body", opOpenAPI, "", "", strings.Repeat(" ", 2<<10), nil)
	for _, route := range []string{opPublish, opTake, opRenew, opComplete, opFail, opRelease} {
		open.expect(415, "Content-Type", route, "", "", "{}", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") })
		open.expect(400, "body", route, "", "", "{", nil)
		open.expect(400, "body", route, "", "", `{"unknown_field": 1}`, nil)
		open.expect(400, "body", route, "", "", `{} {}`, nil)
	}
	open.expect(400, "max", opTake, "", "", `{"max": "two"}`, nil)
	open.expect(400, "max", opTake, "", "", map[string]any{"executor": "ex", "max": -1}, func(r *http.Request) {
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
	})
	open.expect(400, "priority", opPublish, "", "", `{"key": "k", "priority": "high"}`, nil)
	open.expect(400, "executor", opTake, "", "", map[string]any{}, nil)
	open.expect(400, "max", opTake, "", "", map[string]any{"executor": "ex", "max": -1}, nil)
	open.expect(400, "max", opTake, "", "", map[string]any{"executor": "ex", "max": MaxTakeDefault + 1}, nil)
	open.expect(400, "wait_ms", opTake, "", "", map[string]any{"executor": "ex", "wait_ms": MaxWaitDefault.Milliseconds() + 1}, nil)
	open.expect(400, "run_ids", opRenew, "", "", map[string]any{"executor": "ex"}, nil)
	open.expect(409, "", opRenew, "", "", map[string]any{"executor": "ex", "run_ids": []string{"no-such-run"}}, nil)
	for _, route := range []string{opComplete, opFail, opRelease} {
		open.expect(400, "run_id", route, "", "", map[string]any{"executor": "ex"}, nil)
	}
	open.expect(400, "retry", opComplete, "", "", map[string]any{"executor": "ex", "run_id": "r", "retry": false}, nil)
	open.expect(400, "result", opFail, "", "", map[string]any{"executor": "ex", "run_id": "r", "result": 1}, nil)
	open.expect(400, "error", opFail, "", "", map[string]any{"executor": "ex", "run_id": "r"}, nil)
	open.expect(400, "retry", opRelease, "", "", map[string]any{"executor": "ex", "run_id": "r", "retry": true}, nil)
	open.expect(400, "error", opRelease, "", "", map[string]any{"executor": "ex", "run_id": "r", "error": "why"}, nil)
	open.expect(409, "run_id", opComplete, "", "", map[string]any{"executor": "ex", "run_id": "r"}, nil)
	open.expect(409, "run_id", opFail, "", "", map[string]any{"executor": "ex", "run_id": "r", "error": "boom"}, nil)
	open.expect(409, "run_id", opRelease, "", "", map[string]any{"executor": "ex", "run_id": "r"}, nil)

	const token = "0123456789abcdef-token"
	guarded := newOAClient(t, newOAGateway(t, &Config{Tokens: map[string]Executor{token: {ID: "ex", Groups: []string{"g"}}}}), "c")
	guarded.seen = seen
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	for _, route := range oaRouteIDs() {
		if route == opOpenAPI {
			guarded.expect(200, "", route, "", "", nil, nil)
			continue
		}
		guarded.expect(401, "token", route, "k", "", nil, nil)
		guarded.expect(401, "token", route, "k", "", nil, func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong-token-0123456789") })
	}
	guarded.expect(403, "executor", opTake, "", "", map[string]any{"executor": "other"}, bearer)
	guarded.expect(403, "groups", opTake, "", "", map[string]any{"groups": []string{"h"}}, bearer)
	guarded.expect(403, "executor", opRenew, "", "", map[string]any{"executor": "other", "run_ids": []string{"r"}}, bearer)
	guarded.expect(403, "executor", opComplete, "", "", map[string]any{"executor": "other", "run_id": "r"}, bearer)
}

// contractRunAnswers runs tasks through a gateway on a real collection and
// checks every answer against the document.
func contractRunAnswers(t *testing.T, seen map[string]bool) {
	coll := mschedulertest.Collection(t)
	if err := mscheduler.EnsureIndexes(t.Context(), coll); err != nil {
		t.Fatal(err)
	}
	// The missing collection is given, for the answer to a collection that
	// does not exist.
	gw := newOAGateway(t, &Config{Consumer: mscheduler.ConsumerConfig{PollInterval: 50 * time.Millisecond, MaxResultBytes: 1 << 10}},
		coll.Name(), coll.Name()+"_missing")
	c := newOAClient(t, gw, coll.Name())
	c.seen = seen

	// Publish one, then many; refuse both at once.
	c.expect(200, "", opPublish, "", "", map[string]any{"key": "a/1", "params": map[string]any{"n": 1}}, nil)
	out := c.expect(200, "", opPublish, "", "", map[string]any{"tasks": []any{
		map[string]any{"key": "b", "tags": []string{"x"}, "headers": map[string]string{"h": "v"}, "max_retries": -1,
			"run_at": time.Now().Add(-time.Second).Format(time.RFC3339Nano), "description": "b", "group": ""},
		map[string]any{"key": "c", "priority": 5, "ping_interval_ms": 1000, "worker_timeout_ms": 5000},
	}}, nil)
	if res := out["results"].([]any); len(res) != 2 || oaObj(res[0])["outcome"] != "inserted" {
		t.Fatalf("publish many: %v", out)
	}
	c.expect(200, "", opPublish, "", "", map[string]any{"key": "a/1", "params": map[string]any{"n": 1}}, nil)
	c.expect(400, "tasks", opPublish, "", "", map[string]any{"key": "d", "tasks": []any{}}, nil)
	c.expect(400, "", opPublish, "", "", map[string]any{"key": "e", "concurrency": -1}, nil)
	c.expect(400, "", opPublish, "", "", map[string]any{"key": "f", "params": map[string]any{"$date": "not a date"}}, nil)
	other := newOAClient(t, gw, coll.Name()+"_missing")
	other.seen = seen
	other.expect(404, "collection", opPublish, "", "", map[string]any{"key": "a"}, nil)
	other.expect(404, "collection", opList, "", "", nil, nil)
	other.expect(404, "collection", opGet, "a/1", "", nil, nil)
	other.expect(404, "collection", opCancel, "a/1", "", nil, nil)
	other.expect(404, "collection", opTake, "", "", map[string]any{"executor": "ex-1"}, nil)
	meta := newOAClient(t, gw, coll.Name()+".meta")
	meta.seen = seen
	meta.expect(404, "collection", opGet, "a/1", "", nil, nil)

	// Read and list.
	c.expect(200, "", opGet, "a/1", "", nil, nil)
	c.expect(404, "key", opGet, "nope", "", nil, nil)
	list := c.expect(200, "", opList, "", "status=pending&status=running&tag=x&limit=10", nil, nil)
	if tasks := list["tasks"].([]any); len(tasks) != 1 || oaObj(tasks[0])["key"] != "b" {
		t.Errorf("list by tag x: %v", list)
	}
	list = c.expect(200, "", opList, "", "after=a%2F1", nil, nil)
	if tasks := list["tasks"].([]any); len(tasks) != 2 {
		t.Errorf("list after a/1: %v", list)
	}
	c.expect(400, "status", opList, "", "status=bogus", nil, nil)
	c.expect(400, "limit", opList, "", "limit=0", nil, nil)
	c.expect(400, "limit", opList, "", fmt.Sprintf("limit=%d", listLimitMax+1), nil, nil)

	// Take the three runs, renew, and end them each a way.
	runs := map[string]map[string]any{}
	deadline := time.Now().Add(20 * time.Second)
	for len(runs) < 3 && time.Now().Before(deadline) {
		out := c.expect(200, "", opTake, "", "", map[string]any{"executor": "ex-1", "session": "s1", "max": 3, "wait_ms": 2000}, nil)
		for _, r := range out["runs"].([]any) {
			runs[oaObj(r)["key"].(string)] = oaObj(r)
		}
	}
	if len(runs) != 3 {
		t.Fatalf("took %d runs, want 3", len(runs))
	}
	id := func(key string) string { return runs[key]["run_id"].(string) }
	out = c.expect(409, "", opRenew, "", "", map[string]any{"executor": "ex-1", "run_ids": []string{id("a/1"), "no-such-run"}}, nil)
	if len(out["renewed"].([]any)) != 1 || len(out["lost"].([]any)) != 1 {
		t.Errorf("renew with a lost run: %v", out)
	}
	out = c.expect(200, "", opRenew, "", "", map[string]any{"executor": "ex-1", "run_ids": []string{id("a/1"), id("b"), id("c")}}, nil)
	if len(out["renewed"].([]any)) != 3 {
		t.Errorf("renew: %v", out)
	}
	c.expect(409, "", opRenew, "", "", map[string]any{"executor": "ex-2", "run_ids": []string{id("a/1")}}, nil)
	c.expect(403, "run_id", opComplete, "", "", map[string]any{"executor": "ex-2", "run_id": id("a/1")}, nil)
	// A restart: a new session gets the runs back at once, up to max;
	// the earlier session is over.
	out = c.expect(200, "", opTake, "", "", map[string]any{"executor": "ex-1", "session": "s2", "max": 3}, nil)
	if back := out["runs"].([]any); len(back) != 3 || slices.ContainsFunc(back, func(r any) bool { return oaObj(r)["delivery"] != json.Number("2") }) {
		t.Errorf("take with a new session: %v", out)
	}
	c.expect(409, "session", opTake, "", "", map[string]any{"executor": "ex-1", "session": "s1"}, nil)
	c.expect(400, "result", opComplete, "", "", map[string]any{"executor": "ex-1", "run_id": id("a/1"), "result": strings.Repeat("x", 1<<10)}, nil)
	out = c.expect(200, "", opComplete, "", "", map[string]any{"executor": "ex-1", "run_id": id("a/1"), "result": map[string]any{"ok": true}}, nil)
	if out["outcome"] != "succeeded" {
		t.Errorf("complete: %v", out)
	}
	c.expect(409, "run_id", opComplete, "", "", map[string]any{"executor": "ex-1", "run_id": id("a/1")}, nil)
	out = c.expect(200, "", opFail, "", "", map[string]any{"executor": "ex-1", "run_id": id("b"), "error": "boom", "retry": false}, nil)
	if out["outcome"] != "failed" {
		t.Errorf("fail: %v", out)
	}
	out = c.expect(200, "", opRelease, "", "", map[string]any{"executor": "ex-1", "run_id": id("c")}, nil)
	if out["outcome"] != "released" {
		t.Errorf("release: %v", out)
	}
	task := c.expect(200, "", opGet, "a/1", "", nil, nil)
	if task["status"] != "succeeded" || len(task["runs"].([]any)) != 1 {
		t.Errorf("get after complete: %v", task)
	}
	c.expect(200, "", opGet, "b", "", nil, nil)

	// Cancel.
	c.expect(200, "", opCancel, "c", "", nil, nil)
	c.expect(409, "key", opCancel, "c", "", nil, nil)
	c.expect(409, "key", opCancel, "a/1", "", nil, nil)
	c.expect(404, "key", opCancel, "nope", "", nil, nil)
	t.Logf("answers checked: %q", slices.Sorted(maps.Keys(c.seen)))
	contractLateAnswers(t, seen, coll.Name())
}

// contractLateAnswers brings about the answers of a gateway at its bounds:
// an end written after EndWait (202, the outcome pending) and a take that
// would start a consumer beyond MaxPools (429).
func contractLateAnswers(t *testing.T, seen map[string]bool, coll string) {
	gw := newOAGateway(t, &Config{WorkerID: "contract-late", EndWait: time.Nanosecond, MaxPools: 1,
		Consumer: mscheduler.ConsumerConfig{PollInterval: 50 * time.Millisecond}}, coll)
	c := newOAClient(t, gw, coll)
	c.seen = seen
	for _, route := range []string{opComplete, opFail, opRelease} {
		key := "late-" + strings.TrimPrefix(route, "POST /v1/collections/{collection}/")
		c.expect(200, "", opPublish, "", "", map[string]any{"key": key, "max_retries": -1}, nil)
		var id any
		for deadline := time.Now().Add(mschedulertest.WaitTimeout); id == nil; {
			out := c.expect(200, "", opTake, "", "", map[string]any{"executor": "late", "wait_ms": 1000}, nil)
			for _, r := range out["runs"].([]any) {
				if oaObj(r)["key"] == key {
					id = oaObj(r)["run_id"]
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no run of %s taken", key)
			}
		}
		body := map[string]any{"executor": "late", "run_id": id}
		if route == opFail {
			body["error"], body["retry"] = "boom", false
		}
		if out := c.expect(202, "", route, "", "", body, nil); out["outcome"] != "pending" {
			t.Errorf("%s past EndWait: %v, want the outcome pending", route, out)
		}
	}
	c.expect(429, "executor", opTake, "", "", map[string]any{"executor": "late", "groups": []string{"another"}}, nil)
}
