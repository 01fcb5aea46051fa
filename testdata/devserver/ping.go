package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ping sends {ping: 1, $db: "admin"} as an OP_MSG to addr and checks that the answer is ok.
// FerretDB's ping also asks the storage backend for its status, so a success means the data
// directory (or PostgreSQL) is usable, not only that a port is open.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	defer conn.Close()

	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}

	const requestID = 1

	req, err := pingMessage(requestID)
	if err != nil {
		return err
	}

	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("ping: write: %w", err)
	}

	reply, err := readMessage(conn)
	if err != nil {
		return fmt.Errorf("ping: read: %w", err)
	}

	return checkPingReply(reply, requestID)
}

// pingMessage encodes the ping command as an OP_MSG with a single body section (kind 0).
func pingMessage(requestID int32) ([]byte, error) {
	doc, err := bson.Marshal(bson.D{{Key: "ping", Value: int32(1)}, {Key: "$db", Value: "admin"}})
	if err != nil {
		return nil, fmt.Errorf("ping: encode: %w", err)
	}

	msg := make([]byte, headerLen+4+1, headerLen+4+1+len(doc))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	// flagBits (msg[16:20]) and the section kind (msg[20]) stay zero.
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))

	return msg, nil
}

func checkPingReply(reply []byte, requestID int32) error {
	const minDoc = 5 // int32 length and the terminating zero
	if len(reply) < headerLen+4+1+minDoc || binary.LittleEndian.Uint32(reply[12:16]) != opMsg {
		return errors.New("ping: reply is not an OP_MSG")
	}

	if got := int32(binary.LittleEndian.Uint32(reply[8:12])); got != requestID {
		return fmt.Errorf("ping: reply answers request %d, not %d", got, requestID)
	}

	if kind := reply[headerLen+4]; kind != 0 {
		return fmt.Errorf("ping: reply starts with section kind %d, not 0", kind)
	}

	doc := reply[headerLen+4+1:]
	if n := binary.LittleEndian.Uint32(doc); int64(n) <= int64(len(doc)) {
		doc = doc[:n] // drop anything after the document, such as a checksum
	}

	var res struct {
		OK     float64 `bson:"ok"`
		ErrMsg string  `bson:"errmsg"`
	}
	if err := bson.Unmarshal(doc, &res); err != nil {
		return fmt.Errorf("ping: decode reply: %w", err)
	}

	if res.OK != 1 {
		return fmt.Errorf("ping: server answered ok=%v: %s", res.OK, res.ErrMsg)
	}

	return nil
}
