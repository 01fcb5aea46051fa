package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// flagChecksumPresent is the OP_MSG flag saying that a CRC-32C follows the sections.
const flagChecksumPresent = 1 << 0

// command is a decoded OP_MSG request: its body, with the documents of its kind-1 sections
// (the driver sends an insert's documents, an update's statements, as such sequences).
type command struct {
	requestID int32
	flags     uint32
	body      bson.Raw
	sequences map[string][]bson.Raw
}

// name is the command's name: the body's first key.
func (c *command) name() string {
	elems, err := c.body.Elements()
	if err != nil || len(elems) == 0 {
		return ""
	}
	return elems[0].Key()
}

// db is the database the command runs in ($db).
func (c *command) db() string {
	s, _ := c.body.Lookup("$db").StringValueOK()
	return s
}

// documents returns the array field of the body named key, or the kind-1 section of that name.
func (c *command) documents(key string) []bson.Raw {
	docs, _ := c.allDocuments(key)
	return docs
}

// allDocuments is documents, and whether it left out no element of the array that is not a
// document.
func (c *command) allDocuments(key string) ([]bson.Raw, bool) {
	if docs, ok := c.sequences[key]; ok {
		return docs, true
	}
	arr, ok := c.body.Lookup(key).ArrayOK()
	if !ok {
		return nil, false
	}
	values, err := arr.Values()
	if err != nil {
		return nil, false
	}
	docs := make([]bson.Raw, 0, len(values))
	for _, v := range values {
		if d, ok := v.DocumentOK(); ok {
			docs = append(docs, d)
		}
	}
	return docs, len(docs) == len(values)
}

// parseCommand decodes an OP_MSG. It returns false for any other message and for a message it
// cannot read, which the front then passes on untouched for the backend to judge.
func parseCommand(msg []byte) (*command, bool) {
	if len(msg) < headerLen+5 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg {
		return nil, false
	}
	c := &command{
		requestID: int32(binary.LittleEndian.Uint32(msg[4:8])),
		flags:     binary.LittleEndian.Uint32(msg[headerLen : headerLen+4]),
	}
	end := len(msg)
	if c.flags&flagChecksumPresent != 0 {
		end -= 4
	}
	for rest := msg[headerLen+4 : end]; len(rest) > 0; {
		var err error
		if rest, err = c.readSection(rest); err != nil {
			return nil, false
		}
	}
	return c, c.body != nil
}

// readSection reads one section off the front of b and returns what follows it.
func (c *command) readSection(b []byte) ([]byte, error) {
	kind, b := b[0], b[1:]
	switch kind {
	case 0:
		doc, rest, err := readDocument(b)
		c.body = doc
		return rest, err
	case 1:
		if len(b) < 4 {
			return nil, errors.New("short document sequence")
		}
		size := int(binary.LittleEndian.Uint32(b))
		if size < 4 || size > len(b) {
			return nil, errors.New("bad document sequence size")
		}
		seq, rest := b[4:size], b[size:]
		nul := 0
		for nul < len(seq) && seq[nul] != 0 {
			nul++
		}
		if nul == len(seq) {
			return nil, errors.New("unterminated sequence identifier")
		}
		id, seq := string(seq[:nul]), seq[nul+1:]
		if c.sequences == nil {
			c.sequences = make(map[string][]bson.Raw)
		}
		for len(seq) > 0 {
			doc, after, err := readDocument(seq)
			if err != nil {
				return nil, err
			}
			c.sequences[id] = append(c.sequences[id], doc)
			seq = after
		}
		return rest, nil
	default:
		return nil, fmt.Errorf("section kind %d", kind)
	}
}

func readDocument(b []byte) (bson.Raw, []byte, error) {
	if len(b) < 5 {
		return nil, nil, errors.New("short document")
	}
	size := int(binary.LittleEndian.Uint32(b))
	if size < 5 || size > len(b) {
		return nil, nil, errors.New("bad document size")
	}
	doc := bson.Raw(b[:size])
	if err := doc.Validate(); err != nil {
		return nil, nil, err
	}
	return doc, b[size:], nil
}

// lastRequestID numbers the messages the front writes itself.
var lastRequestID atomic.Int32

// opMsgBytes encodes doc as an OP_MSG with a single body section, answering responseTo
// (0 for a request).
func opMsgBytes(responseTo int32, doc []byte) []byte {
	msg := make([]byte, headerLen+4+1, headerLen+4+1+len(doc))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(lastRequestID.Add(1)))
	binary.LittleEndian.PutUint32(msg[8:12], uint32(responseTo))
	binary.LittleEndian.PutUint32(msg[12:16], opMsg)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	return msg
}

// replyBody decodes the body of a reply: an OP_MSG whose first section is the body.
func replyBody(msg []byte) (bson.Raw, error) {
	c, ok := parseCommand(msg)
	if !ok {
		return nil, errors.New("reply is not an OP_MSG")
	}
	return c.body, nil
}

// commandError is a command's failure as the server reports it: {ok: 0, errmsg, code, codeName}.
type commandError struct {
	Code     int32
	CodeName string
	Message  string
}

func (e *commandError) Error() string {
	return fmt.Sprintf("%s (%d): %s", e.CodeName, e.Code, e.Message)
}

// Server error codes that the change streams answer with (MongoDB's error_codes.yml).
const (
	codeBadValue              = 2
	codeFailedToParse         = 9
	codeCursorNotFound        = 43
	codeNotImplemented        = 238
	codeInvalidResumeToken    = 260
	codeChangeStreamFatal     = 280
	codeChangeStreamHistLost  = 286
	codeInternalError         = 1
	codeCursorInUse           = 292
	codeUnrecognizedStageName = 40324
)

var codeNames = map[int32]string{
	codeBadValue:              "BadValue",
	codeFailedToParse:         "FailedToParse",
	codeCursorNotFound:        "CursorNotFound",
	codeNotImplemented:        "NotImplemented",
	codeInvalidResumeToken:    "InvalidResumeToken",
	codeChangeStreamFatal:     "ChangeStreamFatalError",
	codeChangeStreamHistLost:  "ChangeStreamHistoryLost",
	codeInternalError:         "InternalError",
	codeCursorInUse:           "CursorInUse",
	codeUnrecognizedStageName: "Location40324",
}

func newCommandError(code int32, format string, args ...any) *commandError {
	return &commandError{Code: code, CodeName: codeNames[code], Message: fmt.Sprintf(format, args...)}
}

// errorDoc is the reply body for err.
func errorDoc(err error) bson.D {
	var ce *commandError
	if !errors.As(err, &ce) {
		ce = newCommandError(codeInternalError, "%v", err)
	}
	return bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: ce.Message},
		{Key: "code", Value: ce.Code},
		{Key: "codeName", Value: ce.CodeName},
	}
}

// bodyStart is where an OP_MSG's body starts when it is the first section: after the header,
// the flags and the section kind.
const bodyStart = headerLen + 4 + 1

// peekBody returns the body of an OP_MSG whose name peekCommandName reads, bounded by its size
// but not decoded; nil for any other message.
func peekBody(msg []byte) bson.Raw {
	if peekCommandName(msg) == "" {
		return nil
	}
	doc := msg[bodyStart:]
	if size := int(binary.LittleEndian.Uint32(doc)); size >= 5 && size <= len(doc) {
		return doc[:size]
	}
	return nil
}

// peekCommandName returns the name of the command in an OP_MSG without decoding it: the first
// key of its body, when the body is the first section (as drivers send it). It returns "" for
// anything else.
func peekCommandName(msg []byte) string {
	if len(msg) < bodyStart+5+1 || binary.LittleEndian.Uint32(msg[12:16]) != opMsg || msg[headerLen+4] != 0 {
		return ""
	}
	key := msg[bodyStart+5:] // after the document's length and the first element's type
	for i, b := range key {
		if b == 0 {
			return string(key[:i])
		}
	}
	return ""
}
