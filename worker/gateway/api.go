package gateway

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mscheduler/mscheduler/mscheduler"
)

// Route is one route of the gateway, as the OpenAPI document lists it.
type Route struct {
	Method, Pattern string
	handle          func(g *Gateway, w http.ResponseWriter, r *http.Request, c caller) error
}

// Routes are the gateway's routes; {collection} names a task collection
// of the gateway's database, {key} a task's key (escaped in the path).
var Routes = []Route{
	{"POST", "/v1/collections/{collection}/tasks", (*Gateway).publish},
	{"GET", "/v1/collections/{collection}/tasks", (*Gateway).list},
	{"GET", "/v1/collections/{collection}/tasks/{key}", (*Gateway).get},
	{"POST", "/v1/collections/{collection}/tasks/{key}/cancel", (*Gateway).cancel},
	{"POST", "/v1/collections/{collection}/take", (*Gateway).takeRuns},
	{"POST", "/v1/collections/{collection}/renew", (*Gateway).renewRuns},
	{"POST", "/v1/collections/{collection}/complete", (*Gateway).complete},
	{"POST", "/v1/collections/{collection}/fail", (*Gateway).fail},
	{"POST", "/v1/collections/{collection}/release", (*Gateway).release},
	{"GET", "/openapi.json", nil},
}

//go:embed openapi.json
var openAPI []byte

// apiError is an answer other than success: its status, the request field
// it is about ("" when none) and what to do.
type apiError struct {
	status  int
	field   string
	message string
	cause   error // logged by the route, not answered: the driver's detail names hosts
}

func (e *apiError) Error() string { return e.message }

// serverError answers an error of the library or the server: a
// collection that is no task collection is not found, as the gateway
// serves none other; a document the server refused to store is the
// request's fault; anything else says the server cannot serve now, without
// the driver's detail (its topology names the hosts), which the route logs.
func serverError(err error) *apiError {
	var we mongo.WriteException
	switch {
	case errors.Is(err, mscheduler.ErrNotTaskCollection):
		return &apiError{http.StatusNotFound, "collection", strings.TrimPrefix(err.Error(), "mscheduler: "), nil}
	case errors.As(err, &we) && len(we.WriteErrors) > 0 && !mongo.IsDuplicateKeyError(err):
		return &apiError{http.StatusBadRequest, "", "the server refused to store the task as given: " + we.WriteErrors[0].Message, nil}
	}
	return &apiError{http.StatusServiceUnavailable, "", "the server cannot be reached, or did not answer in time: try again later (the gateway's log says more)", err}
}

// errorJSON is the body of every answer that is not a success.
type errorJSON struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeError(w http.ResponseWriter, status int, field, msg string) {
	writeJSON(w, status, errorJSON{Error: msg, Field: field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// route authenticates a request and runs its handler, turning its error
// into the JSON answer.
func (g *Gateway) route(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if rt.handle == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(openAPI)
			return
		}
		c, aerr := g.authenticate(r)
		if aerr == nil {
			if err := rt.handle(g, w, r, c); err != nil && !errors.As(err, &aerr) {
				aerr = &apiError{http.StatusInternalServerError, "", err.Error(), nil}
			}
		}
		if aerr != nil {
			if aerr.cause != nil {
				g.cfg.Logger.Warn("request not served", "method", r.Method, "path", r.URL.Path, "status", aerr.status, "error", aerr.cause)
			}
			writeError(w, aerr.status, aerr.field, aerr.message)
		}
	}
}

// decode reads a JSON body into v, refusing unknown fields, trailing data
// and a body over the limit, naming what is wrong.
func decode(r *http.Request, v any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &apiError{http.StatusUnsupportedMediaType, "Content-Type", fmt.Sprintf("send application/json, not %q", ct), nil}
		}
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		return &apiError{http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("the body is larger than %d bytes", tooBig.Limit), nil}
	case errors.As(err, &typeErr):
		field := strings.TrimPrefix(typeErr.Field, "taskIn.") // the embedded struct of a one-task publish
		return &apiError{http.StatusBadRequest, field, fmt.Sprintf("%s must be a JSON %s, not %s", field, typeErr.Type, typeErr.Value), nil}
	default:
		return &apiError{http.StatusBadRequest, "body", "the body is not the JSON this route takes: " + err.Error(), nil}
	}
}

// millis is a duration in whole milliseconds, as the task document keeps
// them.
func millis(d time.Duration) int64 { return d.Milliseconds() }

// invalidField names the JSON field of a library *InvalidError.
func invalidError(err error, prefix string) *apiError {
	var ie *mscheduler.InvalidError
	if !errors.As(err, &ie) {
		return nil
	}
	return &apiError{http.StatusBadRequest, prefix + jsonFieldOf(ie.Field), jsonNamesIn(ie.Reason), nil}
}
