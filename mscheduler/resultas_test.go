package mscheduler_test

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// ResultAs refuses, naming the run, what cannot be its handler's result.
func TestResultAsRefuses(t *testing.T) {
	doc, err := bson.Marshal(bson.D{{Key: "to", Value: 5}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		run  mscheduler.RunInfo
		want string
	}{
		{"no result", mscheduler.RunInfo{RunID: "r-1", Outcome: mscheduler.OutcomeFailed}, "run r-1 (failed) stored no result"},
		{"wrong type", mscheduler.RunInfo{RunID: "r-2", Outcome: mscheduler.OutcomeSucceeded,
			Result: bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}}, "run r-2: result as mscheduler_test.receipt"},
	} {
		got, err := mscheduler.ResultAs[receipt](tc.run)
		if err == nil || !strings.Contains(err.Error(), tc.want) || got != (receipt{}) {
			t.Errorf("%s: got %+v, %v; want the zero receipt and an error containing %q", tc.name, got, err, tc.want)
		}
	}
}
