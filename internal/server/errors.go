package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kvasir-llm/kvasir"
)

// APIError is an error answered in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
type APIError struct {
	// Status is the HTTP status code.
	Status int `json:"-"`
	// Message says what went wrong, with numbers where they help.
	Message string `json:"message"`
	// Type is OpenAI's error type, such as "invalid_request_error".
	Type string `json:"type"`
	// Param names the offending request field, or is empty.
	Param string `json:"param"`
	// Code is a machine-readable code such as "context_length_exceeded", or empty.
	Code string `json:"code"`
}

func (e *APIError) Error() string { return e.Message }

// MarshalJSON writes empty Param and Code as null, as OpenAI does.
func (e *APIError) MarshalJSON() ([]byte, error) {
	nullable := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return json.Marshal(struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, e.Type, nullable(e.Param), nullable(e.Code)})
}

// errorBody is the JSON body of an error response or stream event.
type errorBody struct {
	Error *APIError `json:"error"`
}

// badRequest is a 400 naming the parameter at fault.
func badRequest(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

func notFound(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "not_found_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func internalError(err error) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: "internal_server_error", Message: err.Error()}
}

// engineError maps an error of Engine.Generate to its API error.
func engineError(err error, promptParam string) *APIError {
	var pe *kvasir.ParamError
	switch {
	case errors.As(err, &pe):
		return badRequest(pe.Param, "%s", err.Error())
	case errors.Is(err, kvasir.ErrTooLong):
		e := badRequest(promptParam, "%s", err.Error())
		e.Code = "context_length_exceeded"
		return e
	case errors.Is(err, kvasir.ErrQueueFull):
		return &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("the server is at capacity (%v); retry later", err)}
	case errors.Is(err, kvasir.ErrClosed):
		return &APIError{Status: http.StatusServiceUnavailable, Type: "service_unavailable_error", Message: "the server is shutting down"}
	}
	return internalError(err)
}

// writeJSON answers v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{internalError(fmt.Errorf("encoding the response: %w", err))})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers an API error.
func writeError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, errorBody{e})
}
