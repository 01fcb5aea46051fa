package mscheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TaskDefaults are the option values a producer gives to tasks that leave an
// option at zero. Each zero field here takes the package default named in
// its comment.
type TaskDefaults struct {
	// Concurrency defaults to [ConcurrencyDefault].
	Concurrency int
	// PingInterval defaults to [PingIntervalDefault].
	PingInterval time.Duration
	// WorkerTimeout defaults to [WorkerTimeoutDefault].
	WorkerTimeout time.Duration
	// MaxRetries defaults to [MaxRetriesDefault]; [NoRetries] disables them.
	MaxRetries int
	// RetryDelay defaults to [RetryDelayDefault].
	RetryDelay time.Duration
	// MaxFailedRuns defaults to [MaxFailedRunsDefault].
	MaxFailedRuns int
	// Source defaults to empty.
	Source string
}

func (d TaskDefaults) withDefaults() TaskDefaults {
	d.Concurrency = cmp.Or(d.Concurrency, ConcurrencyDefault)
	d.PingInterval = cmp.Or(d.PingInterval, PingIntervalDefault)
	d.WorkerTimeout = cmp.Or(d.WorkerTimeout, WorkerTimeoutDefault)
	d.MaxRetries = cmp.Or(d.MaxRetries, MaxRetriesDefault)
	d.RetryDelay = cmp.Or(d.RetryDelay, RetryDelayDefault)
	d.MaxFailedRuns = cmp.Or(d.MaxFailedRuns, MaxFailedRunsDefault)
	return d
}

// taskOptions is the subset of a task that validation checks, shared by
// published tasks and producer defaults.
type taskOptions struct {
	Concurrency   int
	PingInterval  time.Duration
	WorkerTimeout time.Duration
	MaxRetries    int
	RetryDelay    time.Duration
	MaxFailedRuns int
}

func (o taskOptions) validate(prefix string) error {
	switch {
	case o.Concurrency < 1:
		return invalid(prefix+"Concurrency", "must be at least 1, got %d", o.Concurrency)
	case o.PingInterval <= 0:
		return invalid(prefix+"PingInterval", "must be positive, got %s", o.PingInterval)
	case o.WorkerTimeout <= 0:
		return invalid(prefix+"WorkerTimeout", "must be positive, got %s", o.WorkerTimeout)
	case o.PingInterval >= o.WorkerTimeout:
		return invalid(prefix+"PingInterval", "must be shorter than WorkerTimeout (%s), got %s", o.WorkerTimeout, o.PingInterval)
	case o.MaxRetries < NoRetries:
		return invalid(prefix+"MaxRetries", "must be NoRetries (-1) or more, got %d", o.MaxRetries)
	case o.RetryDelay < 0:
		return invalid(prefix+"RetryDelay", "must not be negative, got %s", o.RetryDelay)
	case o.MaxFailedRuns < 1:
		return invalid(prefix+"MaxFailedRuns", "must be at least 1, got %d", o.MaxFailedRuns)
	}
	return nil
}

func (d TaskDefaults) options() taskOptions {
	return taskOptions{d.Concurrency, d.PingInterval, d.WorkerTimeout, d.MaxRetries, d.RetryDelay, d.MaxFailedRuns}
}

// newTaskDoc validates a task, fills its defaults and encodes it. now is the
// server time used when RunAt is zero. Nothing is written here, so a refused
// task leaves the collection untouched.
func newTaskDoc[P any](t *Task[P], d TaskDefaults, now time.Time, prefix string) (*taskDoc, error) {
	if err := validateKey(t.Key, prefix+"Key"); err != nil {
		return nil, err
	}
	if t.Concurrency < 0 {
		return nil, invalid(prefix+"Concurrency", "must be at least 1, got %d", t.Concurrency)
	}
	if t.Group != "" {
		if reason := groupNameProblem(t.Group); reason != "" {
			return nil, invalid(prefix+"Group", "%s", reason)
		}
	}
	opts := taskOptions{
		Concurrency:   cmp.Or(t.Concurrency, d.Concurrency),
		PingInterval:  cmp.Or(t.PingInterval, d.PingInterval),
		WorkerTimeout: cmp.Or(t.WorkerTimeout, d.WorkerTimeout),
		MaxRetries:    cmp.Or(t.MaxRetries, d.MaxRetries),
		RetryDelay:    cmp.Or(t.RetryDelay, d.RetryDelay),
		MaxFailedRuns: cmp.Or(t.MaxFailedRuns, d.MaxFailedRuns),
	}
	if err := opts.validate(prefix); err != nil {
		return nil, err
	}
	if t.Timeout < 0 {
		return nil, invalid(prefix+"Timeout", "must not be negative, got %s", t.Timeout)
	}
	for i, w := range t.WorkerIDs {
		if err := ValidateWorkerID(w); err != nil {
			return nil, invalid(fmt.Sprintf("%sWorkerIDs[%d]", prefix, i), "%s", err.(*InvalidError).Reason)
		}
	}
	for i, tag := range t.Tags {
		if tag == "" {
			return nil, invalid(fmt.Sprintf("%sTags[%d]", prefix, i), "must not be empty")
		}
	}
	if err := validateHeaders(t.Headers, prefix+"Headers"); err != nil {
		return nil, err
	}
	params, err := encodeValue(t.Params)
	if err != nil {
		return nil, invalid(prefix+"Params", "cannot be encoded as BSON: %v", err)
	}
	if len(params.Value) > MaxParamsBytes {
		return nil, invalid(prefix+"Params", "are %d bytes encoded, over MaxParamsBytes (%d): keep large inputs elsewhere and pass a reference", len(params.Value), MaxParamsBytes)
	}
	if path := unstorableKey(params); path != "" {
		return nil, invalid(prefix+"Params"+path, "a field name must not start with $ or hold a dot: a task's params are stored as given, and such a name is an operator or a path to the server")
	}
	runAt := t.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	doc := &taskDoc{
		ID:              t.Key,
		Key:             t.Key,
		Schema:          SchemaVersion,
		Params:          params,
		Status:          StatusPending,
		Priority:        t.Priority,
		RunAt:           runAt,
		Concurrency:     opts.Concurrency,
		DistinctWorkers: t.DistinctWorkers,
		WorkerIDs:       t.WorkerIDs,
		Group:           t.Group,
		PingIntervalMS:  ms(opts.PingInterval),
		WorkerTimeoutMS: ms(opts.WorkerTimeout),
		MaxRetries:      opts.MaxRetries,
		RetryDelayMS:    ms(opts.RetryDelay),
		MaxFailedRuns:   opts.MaxFailedRuns,
		TimeoutMS:       ms(t.Timeout),
		Free:            opts.Concurrency,
		CreatedAt:       now,
		UpdatedAt:       now,
		Description:     t.Description,
		Source:          cmp.Or(t.Source, d.Source),
		Tags:            t.Tags,
		Headers:         t.Headers,
	}
	if t.Plan != nil {
		if err := applyPlan(doc, *t.Plan, t.RunAt, now, prefix); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// validateHeaders refuses a header key MongoDB would read as a path or an
// operator, and headers over MaxHeadersBytes.
func validateHeaders(h map[string]string, field string) error {
	size := 0
	for _, k := range slices.Sorted(maps.Keys(h)) {
		switch {
		case k == "":
			return invalid(field, "must not have an empty key")
		case strings.ContainsAny(k, ".\x00") || strings.HasPrefix(k, "$"):
			return invalid(fmt.Sprintf("%s[%q]", field, k), "a key must not contain '.' or NUL, nor start with '$'")
		}
		size += len(k) + len(h[k])
	}
	if size > MaxHeadersBytes {
		return invalid(field, "are %d bytes, over MaxHeadersBytes (%d)", size, MaxHeadersBytes)
	}
	return nil
}

func validateKey(key, field string) error {
	switch {
	case key == "":
		return invalid(field, "must not be empty")
	case len(key) > MaxKeyBytes:
		return invalid(field, "must be at most %d bytes, got %d", MaxKeyBytes, len(key))
	case !utf8.ValidString(key):
		return invalid(field, "must be valid UTF-8")
	}
	return nil
}

// groupNameProblem says what is wrong with a group's name, or "": a group
// names consumers in their metadata document and filters of queries, and
// a name starting with $ or holding NUL is read as neither.
func groupNameProblem(g string) string {
	switch {
	case len(g) > 256:
		return fmt.Sprintf("must be at most 256 bytes, got %d", len(g))
	case strings.ContainsRune(g, 0):
		return fmt.Sprintf("must not contain NUL, got %q", g)
	case strings.HasPrefix(g, "$"):
		return fmt.Sprintf("must not start with '$', got %q", g)
	case !utf8.ValidString(g):
		return "must be valid UTF-8"
	}
	return ""
}

// ValidateWorkerID reports whether id can name a worker. Worker ids are keys
// of the task document's holders map, so they cannot contain '.', start with
// '$', or be empty.
func ValidateWorkerID(id string) error {
	switch {
	case id == "":
		return invalid("WorkerID", "must not be empty")
	case len(id) > 256:
		return invalid("WorkerID", "must be at most 256 bytes, got %d", len(id))
	case strings.ContainsAny(id, ".\x00"):
		return invalid("WorkerID", "must not contain '.' or NUL, got %q", id)
	case strings.HasPrefix(id, "$"):
		return invalid("WorkerID", "must not start with '$', got %q", id)
	case !utf8.ValidString(id):
		return invalid("WorkerID", "must be valid UTF-8")
	}
	return nil
}

// encodeValue encodes any value (a struct, a map, a scalar) as one BSON value.
func encodeValue(v any) (bson.RawValue, error) {
	if v == nil {
		return bson.RawValue{Type: bson.TypeNull}, nil
	}
	typ, data, err := bson.MarshalValue(v)
	if err != nil {
		return bson.RawValue{}, err
	}
	return bson.RawValue{Type: typ, Value: data}, nil
}
