package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"
)

// DefaultMaxBodyBytes is the default limit of a request body (Config.MaxBodyBytes).
const DefaultMaxBodyBytes = 10 << 20

// decodeBody reads a JSON request body of at most limit bytes into v (a pointer to a
// struct) and returns the top-level fields v does not know, with their values. Every
// failure is an APIError: 413 for an oversized body, 408 (closing the connection) for one
// that did not arrive within the body-read deadline, 400 for invalid UTF-8, malformed JSON
// or a field of the wrong type (naming it).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) (map[string]json.RawMessage, *APIError) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		if isTimeout(err) {
			w.Header().Set("Connection", "close")
			return nil, &APIError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
				Message: "the request body did not arrive within the body-read deadline (--body-timeout)"}
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return decodeJSON(body, v)
}

func tooLarge(limit int64) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("the request body exceeds the limit of %d bytes", limit)}
}

// decodeJSON decodes body into v; see decodeBody.
func decodeJSON(body []byte, v any) (map[string]json.RawMessage, *APIError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("", "the request body is empty: send a JSON object")
	}
	if !utf8.Valid(body) {
		return nil, badRequest("", "the request body is not valid UTF-8")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, jsonError(err)
	}
	if fields == nil {
		return nil, badRequest("", "the request body must be a JSON object, not null")
	}
	if p, ok := v.(prechecker); ok {
		if apiErr := p.precheck(fields); apiErr != nil {
			return nil, apiErr
		}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, jsonError(err)
	}
	known := jsonFields(reflect.TypeOf(v))
	for k := range fields {
		if known[k] {
			delete(fields, k)
		}
	}
	return fields, nil
}

// jsonError turns an encoding/json error into a 400 naming the field when it can.
func jsonError(err error) *APIError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var fieldErr *fieldError
	switch {
	case errors.As(err, &fieldErr):
		return badRequest(fieldErr.param, "%s: %s", fieldErr.param, fieldErr.msg)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("", "the request body must be a JSON object, not a %s", typeErr.Value)
		}
		field := paramPath(typeErr.Field)
		return badRequest(field, "%s: expected %s, got a JSON %s", field, jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return badRequest("", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends early")
	}
	return badRequest("", "malformed JSON: %v", err)
}

// paramPath turns encoding/json's field path ("commonRequest.stop", "messages.0.role")
// into the API's parameter name ("stop", "messages[0].role").
func paramPath(field string) string {
	var b strings.Builder
	for _, part := range strings.Split(field, ".") {
		switch {
		case part == "commonRequest":
		case part != "" && strings.Trim(part, "0123456789") == "":
			b.WriteString("[" + part + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(part)
		}
	}
	return b.String()
}

// fieldError is a field a custom decoder refused; the param names it.
type fieldError struct {
	param, msg string
}

func (e *fieldError) Error() string { return e.param + ": " + e.msg }

// jsonKind names a Go type as a JSON user would.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// jsonFields returns the JSON names of a struct type's fields, embedded structs included.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}

// readRequest decodes the request body into dst, refuses the fields kvasir knows of but
// does not implement yet (unimplementedFields), logs the other fields it does not know, and
// checks the model the request names (model reads it from dst once decoded). On failure it
// answers the client itself and returns false.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, dst any, model func() string) bool {
	unknown, apiErr := decodeBody(w, r, s.cfg.MaxBodyBytes, dst)
	if apiErr == nil {
		apiErr = refuseUnimplemented(unknown)
	}
	if apiErr == nil {
		s.warnUnknown(r.URL.Path, unknown)
		apiErr = s.checkModel(model())
	}
	if apiErr != nil {
		writeError(w, apiErr)
		return false
	}
	return true
}
