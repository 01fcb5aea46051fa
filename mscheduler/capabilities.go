package mscheduler

import "github.com/mscheduler/mscheduler/mscheduler/internal/query"

// codeNotImplemented is the server error code for a feature it lacks.
const codeNotImplemented = query.CodeNotImplemented
