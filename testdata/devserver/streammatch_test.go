package main

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMatchOperators(t *testing.T) {
	doc := must(bson.Marshal(bson.D{
		{Key: "operationType", Value: "update"},
		{Key: "n", Value: int32(5)},
		{Key: "f", Value: 2.5},
		{Key: "null", Value: nil},
		{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: bson.D{
			{Key: "free", Value: int64(2)}, {Key: "status", Value: "cancelled"}, {Key: "plan.started", Value: true},
		}}}},
		{Key: "tags", Value: bson.A{"a", "b"}},
		{Key: "runs", Value: bson.A{bson.D{{Key: "w", Value: "x"}}, bson.D{{Key: "w", Value: "y"}}}},
	}))
	for _, c := range []struct {
		filter string
		want   bool
	}{
		{`{"operationType": "update"}`, true},
		{`{"operationType": "insert"}`, false},
		{`{"operationType": {"$eq": "update"}}`, true},
		{`{"operationType": {"$ne": "update"}}`, false},
		{`{"operationType": {"$in": ["insert", "update"]}}`, true},
		{`{"operationType": {"$nin": ["insert", "update"]}}`, false},
		{`{"operationType": {"$nin": ["insert"]}}`, true},
		{`{"n": {"$gt": 4}}`, true},
		{`{"n": {"$gt": 5}}`, false},
		{`{"n": {"$gte": 5.0}}`, true},
		{`{"n": {"$lt": 5}}`, false},
		{`{"n": {"$lte": 5}, "f": {"$lt": 3}}`, true},
		{`{"n": {"$gt": "4"}}`, false},
		{`{"n": 5.0}`, true},
		{`{"updateDescription.updatedFields.free": {"$gt": 0}}`, true},
		{`{"updateDescription.updatedFields.free": {"$gt": 2}}`, false},
		{`{"updateDescription.updatedFields.run_at": {"$exists": true}}`, false},
		{`{"updateDescription.updatedFields.run_at": {"$exists": false}}`, true},
		{`{"updateDescription.updatedFields.status": {"$exists": true}}`, true},
		{`{"missing": null}`, true},
		{`{"null": null}`, true},
		{`{"n": null}`, false},
		{`{"missing": {"$ne": null}}`, false},
		{`{"n": {"$ne": null}}`, true},
		{`{"tags": "b"}`, true},
		{`{"tags": ["a", "b"]}`, true},
		{`{"tags": {"$in": ["c", "a"]}}`, true},
		{`{"tags.1": "b"}`, true},
		{`{"runs.w": "y"}`, true},
		{`{"runs.w": "z"}`, false},
		{`{"runs.0.w": "y"}`, false},
		{`{"operationType": {"$regex": "^up"}}`, true},
		{`{"operationType": {"$regex": "^UP", "$options": "i"}}`, true},
		{`{"operationType": {"$not": {"$regex": "^up"}}}`, false},
		{`{"n": {"$not": {"$gt": 10}}}`, true},
		{`{"$and": [{"n": 5}, {"f": 2.5}]}`, true},
		{`{"$and": [{"n": 5}, {"f": 3}]}`, false},
		{`{"$or": [{"n": 6}, {"f": 2.5}]}`, true},
		{`{"$or": [{"n": 6}, {"f": 3}]}`, false},
		{`{"$nor": [{"n": 6}, {"f": 3}]}`, true},
		{`{"$nor": [{"n": 5}]}`, false},
		{`{"$or": [{"operationType": {"$in": ["insert", "replace"]}}, {"updateDescription.updatedFields.free": {"$gt": 0}}]}`, true},
		// A dotted name in updatedFields is one field, which a path does not reach and
		// $getField does.
		{`{"updateDescription.updatedFields.plan.started": true}`, false},
		{`{"$expr": {"$eq": [{"$getField": {"field": {"$literal": "plan.started"}, "input": "$updateDescription.updatedFields"}}, true]}}`, true},
		{`{"$expr": {"$eq": [{"$getField": {"field": "plan.gone", "input": "$updateDescription.updatedFields"}}, true]}}`, false},
		{`{"$expr": {"$eq": [{"$getField": {"field": "plan.gone", "input": "$updateDescription.updatedFields"}}, null]}}`, true},
		{`{"$expr": {"$ne": [{"$getField": "operationType"}, "insert"]}}`, true},
		{`{"$expr": {"$eq": ["$n", 5]}}`, true},
		{`{"$expr": {"$eq": ["$updateDescription.updatedFields.free", 3]}}`, false},
		{`{"$expr": "$null"}`, false},
		{`{"$expr": {"$literal": 1}}`, true},
	} {
		var filter bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(c.filter), false, &filter); err != nil {
			t.Fatalf("%s: %v", c.filter, err)
		}
		m, err := compileMatch(filter)
		if err != nil {
			t.Fatalf("%s: %v", c.filter, err)
		}
		if got := m(doc); got != c.want {
			t.Errorf("%s matched %v, want %v", c.filter, got, c.want)
		}
	}
}

func TestMatchRefusesUnknownOperators(t *testing.T) {
	for _, op := range []string{"$elemMatch", "$size", "$all", "$type", "$mod"} {
		filter := must(bson.Marshal(bson.D{{Key: "a", Value: bson.D{{Key: op, Value: 1}}}}))
		_, err := compileMatch(filter)
		var ce *commandError
		if !errors.As(err, &ce) || ce.Code != codeNotImplemented || !strings.Contains(ce.Message, op) {
			t.Errorf("%s: %v, want NotImplemented naming it", op, err)
		}
	}
}

func TestExprRefusesUnknownOperators(t *testing.T) {
	for _, c := range []struct{ expr, name string }{
		{`{"$add": [1, 2]}`, "$add"},
		{`{"$eq": ["$$ROOT", 1]}`, "$$ROOT"},
		{`{"$eq": [{"a": 1}, 1]}`, "object expression"},
	} {
		var expr bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(c.expr), false, &expr); err != nil {
			t.Fatal(err)
		}
		_, err := compileMatch(must(bson.Marshal(bson.D{{Key: "$expr", Value: expr}})))
		var ce *commandError
		if !errors.As(err, &ce) || ce.Code != codeNotImplemented || !strings.Contains(ce.Message, c.name) {
			t.Errorf("%s: %v, want NotImplemented naming %s", c.expr, err, c.name)
		}
	}
}

func TestUpdateDescription(t *testing.T) {
	before := must(bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "m", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 1}}}, {Key: "arr", Value: bson.A{1}}, {Key: "gone", Value: 1}}))
	after := must(bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "m", Value: bson.D{{Key: "x", Value: 2}}}, {Key: "arr", Value: bson.A{1, 2}}, {Key: "new", Value: "n"}}))
	var got struct {
		UpdatedFields bson.D   `bson:"updatedFields"`
		RemovedFields []string `bson:"removedFields"`
	}
	if err := bson.Unmarshal(updateDescription(before, after), &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got.UpdatedFields {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, ",") != "m.x,arr,new" || strings.Join(got.RemovedFields, ",") != "m.y,gone" {
		t.Fatalf("updatedFields %v, removedFields %v; want m.x, arr, new and m.y, gone", keys, got.RemovedFields)
	}
}
