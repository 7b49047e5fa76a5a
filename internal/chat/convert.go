package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	"github.com/ardanlabs/jinja"
)

// keyRank orders the keys of OpenAI-shaped tool objects as OpenAI's documentation writes them.
// Go maps have no order, so map keys are emitted in this order first and the rest sorted, which
// makes `tools | tojson` match what a client sent in the common case. A value given as
// json.RawMessage keeps its own order exactly.
func keyRank(k string) (int, bool) {
	switch k {
	case "type":
		return 0, true
	case "function":
		return 1, true
	case "name":
		return 2, true
	case "description":
		return 3, true
	case "parameters":
		return 4, true
	case "properties":
		return 5, true
	case "required":
		return 6, true
	}
	return 0, false
}

// orderKeys sorts keys by keyRank, then alphabetically.
func orderKeys(keys []string) {
	sort.Slice(keys, func(i, j int) bool {
		pi, iok := keyRank(keys[i])
		pj, jok := keyRank(keys[j])
		switch {
		case iok && jok:
			return pi < pj
		case iok != jok:
			return iok
		default:
			return keys[i] < keys[j]
		}
	})
}

// maxDepth bounds nesting of converted values so hostile input cannot exhaust the stack.
const maxDepth = 256

// toValue converts a plain Go value (nil, bools, numbers, strings, slices, string-keyed maps,
// json.Number, json.RawMessage, Tool) into a template value. path names the value in errors.
func toValue(v any, path string, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Undefined(), fmt.Errorf("%s: nested deeper than %d levels", path, maxDepth)
	}
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int8:
		return jinja.NewInt(int64(x)), nil
	case int16:
		return jinja.NewInt(int64(x)), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case uint:
		return jinja.NewInt(int64(x)), nil
	case uint8:
		return jinja.NewInt(int64(x)), nil
	case uint16:
		return jinja.NewInt(int64(x)), nil
	case uint32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case float64:
		return jinja.NewFloat(x), nil
	case json.Number:
		return jinja.FromGoValue(x), nil
	case json.RawMessage:
		return jsonToValue(x, path)
	case Tool:
		return toValue(x.Map(), path, depth)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		orderKeys(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			kv, err := toValue(x[k], path+"."+k, depth+1)
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(k, kv)
		}
		return d, nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, item := range x {
			iv, err := toValue(item, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = iv
		}
		return jinja.NewList(items), nil
	}
	return reflectToValue(reflect.ValueOf(v), path, depth)
}

// reflectToValue handles slices and string-keyed maps of other element types ([]string,
// []map[string]any, map[string]string, ...).
func reflectToValue(rv reflect.Value, path string, depth int) (jinja.Value, error) {
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		items := make([]jinja.Value, rv.Len())
		for i := range rv.Len() {
			iv, err := toValue(rv.Index(i).Interface(), fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = iv
		}
		return jinja.NewList(items), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		m := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			m[iter.Key().String()] = iter.Value().Interface()
		}
		return toValue(m, path, depth)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return jinja.None(), nil
		}
		return toValue(rv.Elem().Interface(), path, depth)
	}
	if !rv.IsValid() {
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("%s: unsupported value type %s", path, rv.Type())
}

// jsonToValue decodes JSON text into a template value, keeping object keys in document order
// (as Python's json.loads does).
func jsonToValue(raw []byte, path string) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("%s: decoding JSON: %w", path, err)
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Undefined(), fmt.Errorf("%s: decoding JSON: trailing data", path)
	}
	return v, nil
}

// decodeJSON reads one JSON value from dec.
func decodeJSON(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Undefined(), fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				val, err := decodeJSON(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeJSON(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected delimiter %v", t)
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// messageValue converts m to the dict a template sees under transformers: role and content
// always, the optional fields only when set.
func messageValue(m Message, path string) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	content, err := contentValue(m.Content, path+".content")
	if err != nil {
		return jinja.Undefined(), err
	}
	dict.Set("content", content)
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			calls[i] = toolCallValue(tc)
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.ReasoningContent != "" {
		dict.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	return d, nil
}

// contentValue converts a message content: a string, nil, []ContentPart, or plain values.
func contentValue(c any, path string) (jinja.Value, error) {
	switch x := c.(type) {
	case nil:
		return jinja.None(), nil
	case string:
		return jinja.NewString(x), nil
	case []ContentPart:
		parts := make([]jinja.Value, len(x))
		for i, p := range x {
			parts[i] = contentPartValue(p)
		}
		return jinja.NewList(parts), nil
	}
	return toValue(c, path, 0)
}

// contentPartValue converts one content part to {"type", "text"} or
// {"type", "image_url": {"url"}}.
func contentPartValue(p ContentPart) jinja.Value {
	d := jinja.NewDict()
	dict := d.AsDict()
	typ := p.Type
	if typ == "" {
		typ = "text"
	}
	dict.Set("type", jinja.NewString(typ))
	if p.Text != "" || typ == "text" {
		dict.Set("text", jinja.NewString(p.Text))
	}
	if p.ImageURL != "" {
		u := jinja.NewDict()
		u.AsDict().Set("url", jinja.NewString(p.ImageURL))
		dict.Set("image_url", u)
	}
	return d
}

// toolCallValue converts a tool call to {"id", "type", "function": {"name", "arguments"}},
// with the arguments parsed into a dict when they are a JSON object.
func toolCallValue(tc ToolCall) jinja.Value {
	fn := jinja.NewDict()
	fn.AsDict().Set("name", jinja.NewString(tc.Function.Name))
	args := jinja.NewString(tc.Function.Arguments)
	if parsed, err := jsonToValue([]byte(tc.Function.Arguments), "arguments"); err == nil && parsed.IsDict() {
		args = parsed
	}
	fn.AsDict().Set("arguments", args)

	d := jinja.NewDict()
	dict := d.AsDict()
	if tc.ID != "" {
		dict.Set("id", jinja.NewString(tc.ID))
	}
	typ := tc.Type
	if typ == "" {
		typ = "function"
	}
	dict.Set("type", jinja.NewString(typ))
	dict.Set("function", fn)
	return d
}
