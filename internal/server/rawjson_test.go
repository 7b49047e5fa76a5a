package server

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestListLen(t *testing.T) {
	for raw, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `[1]`: 1, `[1,2,3]`: 3, `["a,b","c\"]",{"x":[1,2]}]`: 3, `[[],[[]]]`: 2, "[\n\"\\\\\"\n]": 1,
	} {
		if got, ok := listLen([]byte(raw)); !ok || got != want {
			t.Errorf("listLen(%s) = %d, %v; want %d", raw, got, ok, want)
		}
	}
	for _, raw := range []string{`"a,b"`, `{"a":[1,2]}`, `12`, `null`, ``} {
		if _, ok := listLen([]byte(raw)); ok {
			t.Errorf("listLen(%s) took it for a list", raw)
		}
	}
}

// FuzzListLen checks listLen against encoding/json on any valid JSON value.
func FuzzListLen(f *testing.F) {
	for _, s := range []string{`[]`, `[1, "a,]", {"b": [2, 3]}]`, `"x"`, `[[[]],[]]`, `[ "\\", "\"" ]`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var list []json.RawMessage
		isList := json.Unmarshal(raw, &list) == nil && list != nil
		n, ok := listLen(raw)
		if ok != isList || (ok && n != len(list)) {
			t.Fatalf("listLen(%q) = %d, %v; encoding/json: list %v of %d", raw, n, ok, isList, len(list))
		}
	})
}

func TestStringLen(t *testing.T) {
	for raw, want := range map[string]int{
		`""`: 0, ` "abc" `: 3, `"a\"b"`: 3, `"\n\\"`: 2, `"\u00e9"`: 2, `"é"`: 2, `"\ud83d\ude00"`: 4, `"\ud83d"`: 3, `"\ud83dx"`: 4, `"\u0041\u20ac"`: 4,
	} {
		if got, ok := stringLen([]byte(raw)); !ok || got != want {
			t.Errorf("stringLen(%s) = %d, %v; want %d", raw, got, ok, want)
		}
	}
	if _, ok := stringLen([]byte(`["a"]`)); ok {
		t.Error("stringLen took a list for a string")
	}
}

// FuzzStringLen checks stringLen against encoding/json on any valid JSON value.
func FuzzStringLen(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00\u00e9\n"`, `"\udc00\ud800"`, `1`, `"\ud800\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || !utf8.Valid(raw) {
			return // decodeJSON refuses invalid UTF-8 before anything scans it
		}
		var s *string
		isString := json.Unmarshal(raw, &s) == nil && s != nil
		n, ok := stringLen(raw)
		if ok != isString || (ok && n != len(*s)) {
			t.Fatalf("stringLen(%q) = %d, %v; encoding/json: string %v %v", raw, n, ok, isString, s)
		}
	})
}

// FuzzMembers checks members against encoding/json on any valid JSON value.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": 1, "b" : [1, {"c": 2}], "d":"x,}"}`, `[1]`, `{ "k\"": {} }`, `"s"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var want map[string]json.RawMessage
		isObject := json.Unmarshal(raw, &want) == nil && want != nil
		got := map[string]json.RawMessage{}
		n := 0
		ok := members(raw, func(key, value []byte) bool {
			var k string
			if err := json.Unmarshal(key, &k); err != nil {
				t.Fatalf("members(%q): key %q: %v", raw, key, err)
			}
			got[k] = bytes.TrimSpace(value)
			n++
			return true
		})
		if ok != isObject {
			t.Fatalf("members(%q) took it for an object: %v; encoding/json: %v", raw, ok, isObject)
		}
		if !ok {
			return
		}
		if len(got) != len(want) || n < len(want) {
			t.Fatalf("members(%q) gave %d members (%d keys), encoding/json %d", raw, n, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], bytes.TrimSpace(v)) {
				t.Fatalf("members(%q): %q = %q, encoding/json %q", raw, k, got[k], v)
			}
		}
	})
}
