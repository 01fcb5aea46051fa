package mscheduler_test

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
	"github.com/mscheduler/mscheduler/mscheduler/mschedulertest"
)

// TestParamsWithOperatorOrPathNamesAreRefused: params holding a field name
// that starts with $ or holds a dot, at any depth, are refused naming the
// path to it, and nothing is stored: one server refuses such a document,
// another takes the name as an operator or a path.
func TestParamsWithOperatorOrPathNamesAreRefused(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[bson.M](t, coll, nil)
	for _, c := range []struct {
		params bson.M
		field  string
	}{
		{bson.M{"$where": "1"}, `Params["$where"]`},
		{bson.M{"a": bson.M{"b.c": 1}}, `Params["a"]["b.c"]`},
		{bson.M{"list": bson.A{1, bson.M{"$inc": 2}}}, `Params["list"][1]["$inc"]`},
	} {
		_, err := p.Publish(ctxT(t), mscheduler.Task[bson.M]{Key: "k", Params: c.params}, nil)
		var inv *mscheduler.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("params %v: err = %v, want an InvalidError naming %s", c.params, err, c.field)
		}
	}
	if _, err := p.Publish(ctxT(t), mscheduler.Task[bson.M]{Key: "ok", Params: bson.M{"a": bson.A{bson.M{"b": "$c"}}}}, nil); err != nil {
		t.Errorf("params with $ in a value, not a name: %v", err)
	}
	if n := countDocs(t, coll, bson.D{{Key: "_id", Value: "k"}}); n != 0 {
		t.Errorf("%d refused tasks stored", n)
	}
}

// TestGroupNamesAreChecked: a task's group, and a consumer's, that starts
// with $ or holds NUL is refused naming the field.
func TestGroupNamesAreChecked(t *testing.T) {
	coll := mschedulertest.Collection(t)
	p := newProducer[int](t, coll, nil)
	for _, g := range []string{"$all", "a\x00b"} {
		_, err := p.Publish(ctxT(t), mscheduler.Task[int]{Key: "k", Group: g}, nil)
		var inv *mscheduler.InvalidError
		if !errors.As(err, &inv) || inv.Field != "Group" {
			t.Errorf("task group %q: err = %v, want an InvalidError naming Group", g, err)
		}
		cfg := fastConfig("w", mschedulertest.NewEvents())
		cfg.Groups = []string{"ok", g}
		_, err = mscheduler.NewConsumer(coll, func(context.Context, *mscheduler.Task[int]) (int, error) { return 0, nil }, cfg)
		if !errors.As(err, &inv) || inv.Field != "Groups[1]" {
			t.Errorf("consumer group %q: err = %v, want an InvalidError naming Groups[1]", g, err)
		}
	}
}
