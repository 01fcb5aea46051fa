// Package stored is the layout of a task collection's documents and the
// one gate every read of them goes through.
//
// The collections are untrusted input: people edit them in mongosh and
// Compass. So no code reads a stored document by decoding it straight into
// a struct. It asks this package, which decodes field by field and returns
// what could be read together with the first [Problem], naming the field as
// stored: one wrong field never fails a batch of documents, and a caller
// decides what it can still do with the rest.
//
// A decoded task keeps its _id exactly as read ([Task.RawID]): writes that
// follow a read are fenced on that value, never on a decoded copy of
// another field.
//
// The package knows shapes only. Which changes of a task are allowed, and
// how each is written, belongs to the owner of a task's state
// (internal/taskstate).
package stored
