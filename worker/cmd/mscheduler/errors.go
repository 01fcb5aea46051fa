package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// opError is a failed operation, with a message for an operator and the
// library's error underneath.
type opError struct {
	msg string
	err error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.err }

// taskError describes err, returned by the operation verb on the task key.
// The library's messages name the package and repeat what failed; here the
// command names itself once, and says what was refused in its own words.
func taskError(verb, key string, err error) error {
	var invalid *mscheduler.InvalidError
	switch {
	case errors.Is(err, mscheduler.ErrNotFound):
		return &opError{msg: fmt.Sprintf("%s %q: task not found", verb, key), err: err}
	case errors.As(err, &invalid) && invalid.Field == "key":
		return &opError{msg: fmt.Sprintf("%s %q: %s", verb, key, invalid.Reason), err: err}
	case errors.As(err, &invalid):
		return &opError{msg: fmt.Sprintf("%s %q: invalid %s: %s", verb, key, invalid.Field, invalid.Reason), err: err}
	}
	return libraryError(err)
}

// libraryError drops the package name that leads the library's messages:
// the command prints its own.
func libraryError(err error) error {
	return &opError{msg: strings.TrimPrefix(err.Error(), "mscheduler: "), err: err}
}
