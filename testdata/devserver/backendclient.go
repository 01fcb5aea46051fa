package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// backendClient is the front's own connection to the backend, for the reads that tell the change
// streams what a write changed. It is only used by the holder of the front's exchangeMu, so the
// reads see no other command between them and the write they surround.
type backendClient struct {
	f *front

	conn net.Conn
	r    *bufio.Reader

	sent atomic.Int64 // commands sent, for tests that check what the streams cost
}

// run sends cmd to database db and returns the reply's body, or the command's error.
func (b *backendClient) run(db string, cmd bson.D) (bson.Raw, error) {
	if err := b.connect(); err != nil {
		return nil, err
	}
	doc, err := bson.Marshal(append(cmd, bson.E{Key: "$db", Value: db}))
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", cmd[0].Key, err)
	}
	b.sent.Add(1)
	reply, err := b.roundTrip(opMsgBytes(0, doc))
	if err != nil {
		b.drop()
		return nil, fmt.Errorf("%s: %w", cmd[0].Key, err)
	}
	body, err := replyBody(reply)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd[0].Key, err)
	}
	if err := replyError(body); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd[0].Key, err)
	}
	return body, nil
}

func (b *backendClient) roundTrip(req []byte) ([]byte, error) {
	if _, err := b.conn.Write(req); err != nil {
		return nil, err
	}
	return readMessage(b.r)
}

func (b *backendClient) connect() error {
	if b.conn != nil {
		return nil
	}
	conn, err := net.DialTimeout("tcp", b.f.backendAddr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("dial backend: %w", err)
	}
	if !b.f.track(conn) {
		return errors.New("the server is shutting down")
	}
	b.conn, b.r = conn, bufio.NewReader(conn)
	return nil
}

// drop forgets a connection that failed; the next read dials anew.
func (b *backendClient) drop() {
	if b.conn != nil {
		b.f.release(b.conn)
		b.conn, b.r = nil, nil
	}
}

// readBatchSize is the batch size of the front's reads.
const readBatchSize = 1000

// find returns the documents of db.coll that match filter, in sort order, at most limit of them
// (0: all).
func (b *backendClient) find(db, coll string, filter, sort any, limit int64) ([]bson.Raw, error) {
	cmd := bson.D{{Key: "find", Value: coll}, {Key: "filter", Value: filter}}
	if sort != nil {
		cmd = append(cmd, bson.E{Key: "sort", Value: sort})
	}
	if limit > 0 {
		cmd = append(cmd, bson.E{Key: "limit", Value: limit})
	}
	// FerretDB 1.24 allocates a batch's capacity up front: a huge batchSize costs seconds.
	cmd = append(cmd, bson.E{Key: "batchSize", Value: int32(readBatchSize)})
	return b.readAll(db, coll, cmd)
}

// readAll runs cmd, which opens a cursor on db.coll, and returns every document of the cursor.
func (b *backendClient) readAll(db, coll string, cmd bson.D) ([]bson.Raw, error) {
	reply, err := b.run(db, cmd)
	if err != nil {
		return nil, err
	}
	docs, id := cursorBatch(reply, "firstBatch")
	for id != 0 {
		getMore := bson.D{{Key: "getMore", Value: id}, {Key: "collection", Value: coll}, {Key: "batchSize", Value: int32(readBatchSize)}}
		if reply, err = b.run(db, getMore); err != nil {
			return nil, err
		}
		var more []bson.Raw
		more, id = cursorBatch(reply, "nextBatch")
		docs = append(docs, more...)
	}
	return docs, nil
}

// byIDs returns the documents of db.coll whose _id is one of ids, keyed by their _id.
func (b *backendClient) byIDs(db, coll string, ids []bson.RawValue) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// FerretDB looks up a filter that is exactly {_id: x} by key (x a string or an ObjectId) and
	// scans for anything else: a few such ids are read one by one.
	if len(ids) == 1 || len(ids) <= byKeyMax && !slices.ContainsFunc(ids, func(id bson.RawValue) bool {
		return id.Type != bson.TypeString && id.Type != bson.TypeObjectID
	}) {
		for _, id := range ids {
			docs, err := b.find(db, coll, bson.D{{Key: "_id", Value: id}}, nil, 0)
			if err != nil {
				return nil, err
			}
			for _, d := range docs {
				out[idKey(d.Lookup("_id"))] = d
			}
		}
		return out, nil
	}
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	docs, err := b.find(db, coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}, nil, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		out[idKey(d.Lookup("_id"))] = d
	}
	return out, nil
}

// byKeyMax is how many ids byIDs reads one by one, by key, rather than in one scan: a lookup by
// key costs a few milliseconds, a scan of a few hundred documents some tens.
const byKeyMax = 16

// collectionNames lists the collections of db.
func (b *backendClient) collectionNames(db string) ([]string, error) {
	reply, err := b.run(db, bson.D{{Key: "listCollections", Value: 1}, {Key: "nameOnly", Value: true}})
	if err != nil {
		return nil, err
	}
	docs, _ := cursorBatch(reply, "firstBatch")
	names := make([]string, 0, len(docs))
	for _, d := range docs {
		if name, ok := d.Lookup("name").StringValueOK(); ok {
			names = append(names, name)
		}
	}
	return names, nil
}

// cursorBatch reads a cursor reply: its batch (firstBatch or nextBatch) and its id.
func cursorBatch(reply bson.Raw, batch string) ([]bson.Raw, int64) {
	cur, _ := reply.Lookup("cursor").DocumentOK()
	id, _ := cur.Lookup("id").AsInt64OK()
	arr, _ := cur.Lookup(batch).ArrayOK()
	values, _ := arr.Values()
	docs := make([]bson.Raw, 0, len(values))
	for _, v := range values {
		if d, ok := v.DocumentOK(); ok {
			docs = append(docs, d)
		}
	}
	return docs, id
}

// replyError is the error a reply body reports, or nil when it says ok.
func replyError(body bson.Raw) error {
	if ok, _ := body.Lookup("ok").AsFloat64OK(); ok == 1 {
		return nil
	}
	msg, _ := body.Lookup("errmsg").StringValueOK()
	code, _ := body.Lookup("code").AsInt64OK()
	name, _ := body.Lookup("codeName").StringValueOK()
	return &commandError{Code: int32(code), CodeName: name, Message: msg}
}

// idKey identifies an _id value in a map: its type and bytes.
func idKey(v bson.RawValue) string {
	return string(rune(v.Type)) + string(v.Value)
}
