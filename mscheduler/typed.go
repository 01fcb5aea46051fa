package mscheduler

import (
	"context"
	"fmt"
	"runtime/debug"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
)

// typedPrepare is the typed layer of a Consumer: it decodes a claimed
// task's params into P, calls the handler through the middleware, turning
// a panic into a *PanicError, and encodes its R.
func typedPrepare[P, R any](handler Handler[P, R], middleware []Middleware) engine.PrepareFunc {
	return func(doc *taskDoc, run *Run) (engine.CallFunc, error) {
		task, err := decodeTask[P](doc)
		if err != nil {
			return nil, err
		}
		task.Run = run
		return func(ctx context.Context) (result bson.RawValue, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = &PanicError{Value: p, Stack: string(debug.Stack())}
				}
			}()
			call := RunFunc(func(ctx context.Context, _ *Attempt) error {
				task.RunAt = doc.RunAt // the plan gate may have moved it since the claim
				r, err := handler(ctx, task)
				if err != nil {
					return err
				}
				if result, err = encodeValue(r); err != nil {
					// Not the handler's failure: running it again gives
					// the same result.
					return SkipRetry(fmt.Errorf("result cannot be encoded as BSON: %v", err))
				}
				return nil
			})
			for i := len(middleware) - 1; i >= 0; i-- {
				call = middleware[i](call)
			}
			err = call(ctx, &Attempt{Key: doc.Key, Run: run, Headers: doc.Headers})
			return result, err
		}, nil
	}
}

// decodeTask builds the handler's view of a stored task (without Run). Its
// error says why the params do not decode into P.
func decodeTask[P any](doc *taskDoc) (*Task[P], error) {
	t := &Task[P]{
		Key:             doc.Key,
		Priority:        doc.Priority,
		RunAt:           doc.RunAt,
		Concurrency:     doc.Concurrency,
		DistinctWorkers: doc.DistinctWorkers,
		WorkerIDs:       doc.WorkerIDs,
		Group:           doc.Group,
		PingInterval:    fromMS(doc.PingIntervalMS),
		WorkerTimeout:   fromMS(doc.WorkerTimeoutMS),
		MaxRetries:      doc.MaxRetries,
		RetryDelay:      fromMS(doc.RetryDelayMS),
		MaxFailedRuns:   doc.MaxFailedRuns,
		Timeout:         fromMS(doc.TimeoutMS),
		Description:     doc.Description,
		Source:          doc.Source,
		Tags:            doc.Tags,
		Headers:         doc.Headers,
	}
	if doc.Plan != nil {
		if p, err := planOf(doc.Plan); err == nil {
			t.Plan = &p
		}
	}
	if doc.Params.Type != 0 {
		if err := doc.Params.Unmarshal(&t.Params); err != nil {
			return t, fmt.Errorf("cannot be decoded into %T: %v", t.Params, err)
		}
	}
	return t, nil
}
