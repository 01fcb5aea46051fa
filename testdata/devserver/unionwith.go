package main

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FerretDB 1.24 has no $unionWith. The front serves an aggregate whose pipeline ends in
// $unionWith stages by running its head on the collection named and each union's pipeline on
// its own collection, under the front's lock, and answering with all their documents in one
// batch: one command for the client, as on MongoDB, where the server runs the sub-pipelines.
// Only trailing $unionWith stages are served; a stage after one is refused, naming it.

// unionAggregate is an aggregate with trailing $unionWith stages, as parsed.
type unionAggregate struct {
	requestID  int32
	moreToCome bool
	db         string
	coll       string
	head       bson.A // the stages before the first $unionWith
	unions     []unionPart
}

// unionPart is one $unionWith: the collection it reads and its pipeline.
type unionPart struct {
	coll     string
	pipeline bson.A
}

// parseUnionAggregate reads req as an aggregate with $unionWith stages; false for any other
// command, which the front passes on.
func parseUnionAggregate(req []byte) (*unionAggregate, error, bool) {
	if peekCommandName(req) != "aggregate" {
		return nil, nil, false
	}
	cmd, ok := parseCommand(req)
	if !ok {
		return nil, nil, false
	}
	coll, ok := cmd.body.Lookup("aggregate").StringValueOK()
	if !ok {
		return nil, nil, false
	}
	stages := cmd.documents("pipeline")
	first := -1
	for i, st := range stages {
		if stageName(st) == "$unionWith" {
			first = i
			break
		}
	}
	if first < 0 {
		return nil, nil, false
	}
	u := &unionAggregate{requestID: cmd.requestID, moreToCome: cmd.flags&flagMoreToCome != 0, db: cmd.db(), coll: coll}
	for _, st := range stages[:first] {
		u.head = append(u.head, st)
	}
	for _, st := range stages[first:] {
		part, err := parseUnionStage(st)
		if err != nil {
			return u, err, true
		}
		u.unions = append(u.unions, part)
	}
	return u, nil, true
}

// stageName is the operator of a pipeline stage: its first key.
func stageName(stage bson.Raw) string {
	elems, err := stage.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// parseUnionStage reads one $unionWith stage: a collection name, or {coll, pipeline}.
func parseUnionStage(stage bson.Raw) (unionPart, error) {
	if name := stageName(stage); name != "$unionWith" {
		return unionPart{}, newCommandError(codeNotImplemented,
			"the development server serves $unionWith only as trailing stages; %s follows one", name)
	}
	v := stage.Lookup("$unionWith")
	if name, ok := v.StringValueOK(); ok {
		return unionPart{coll: name}, nil
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return unionPart{}, newCommandError(codeFailedToParse, "$unionWith takes a collection name or a document")
	}
	name, ok := doc.Lookup("coll").StringValueOK()
	if !ok {
		return unionPart{}, newCommandError(codeFailedToParse, "$unionWith needs a coll (the development server reads no collection-less union)")
	}
	part := unionPart{coll: name}
	if arr, ok := doc.Lookup("pipeline").ArrayOK(); ok {
		values, err := arr.Values()
		if err != nil {
			return unionPart{}, newCommandError(codeFailedToParse, "$unionWith pipeline: %v", err)
		}
		for _, val := range values {
			st, ok := val.DocumentOK()
			if !ok {
				return unionPart{}, newCommandError(codeFailedToParse, "$unionWith pipeline: each stage is a document")
			}
			part.pipeline = append(part.pipeline, st)
		}
	}
	return part, nil
}

// answerUnion runs u's parts under the front's lock and returns the reply.
func (f *front) answerUnion(u *unionAggregate, parseErr error) [][]byte {
	doc := func() bson.D {
		if parseErr != nil {
			return errorDoc(parseErr)
		}
		f.exchangeMu.Lock()
		defer f.exchangeMu.Unlock()
		docs, err := f.reader.aggregate(u.db, u.coll, u.head)
		for _, part := range u.unions {
			if err != nil {
				break
			}
			var more []bson.Raw
			more, err = f.reader.aggregate(u.db, part.coll, part.pipeline)
			docs = append(docs, more...)
		}
		if err != nil {
			return errorDoc(err)
		}
		batch := make(bson.A, len(docs))
		for i, d := range docs {
			batch[i] = d
		}
		return bson.D{
			{Key: "cursor", Value: bson.D{
				{Key: "firstBatch", Value: batch},
				{Key: "id", Value: int64(0)},
				{Key: "ns", Value: u.db + "." + u.coll},
			}},
			{Key: "ok", Value: 1.0},
		}
	}()
	if u.moreToCome {
		return nil
	}
	return [][]byte{opMsgBytes(u.requestID, mustMarshal(doc))}
}

// aggregate runs pipeline on db.coll and returns every document it gives.
func (b *backendClient) aggregate(db, coll string, pipeline bson.A) ([]bson.Raw, error) {
	if pipeline == nil {
		pipeline = bson.A{}
	}
	cmd := bson.D{
		{Key: "aggregate", Value: coll},
		{Key: "pipeline", Value: pipeline},
		{Key: "cursor", Value: bson.D{{Key: "batchSize", Value: int32(readBatchSize)}}},
	}
	docs, err := b.readAll(db, coll, cmd)
	if err != nil {
		return nil, fmt.Errorf("$unionWith on %s: %w", coll, err)
	}
	return docs, nil
}
