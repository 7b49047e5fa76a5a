package chat

import (
	"encoding/json"
	"testing"
)

// TestToJSON checks the tojson filter against Python's json.dumps output.
func TestToJSON(t *testing.T) {
	value := json.RawMessage(`{"b": 1, "a": [1.0, 2.5, -0.0001, 1e16, 123456789012], "s": "é<&>\"\\\n\u0001😀", "n": null, "t": true, "e": {}, "l": []}`)
	tests := []struct {
		name, expr string
		want       string
	}{
		{"default", `{{ v | tojson }}`,
			`{"b": 1, "a": [1.0, 2.5, -0.0001, 1e+16, 123456789012], "s": "é<&>\"\\\n\u0001😀", "n": null, "t": true, "e": {}, "l": []}`},
		{"ensure_ascii", `{{ v.s | tojson(ensure_ascii=True) }}`, `"\u00e9<&>\"\\\n\u0001\ud83d\ude00"`},
		{"separators", `{{ v.a | tojson(separators=(',', ':')) }}`, `[1.0,2.5,-0.0001,1e+16,123456789012]`},
		{"sort_keys", `{{ {"b": 1, "a": 2} | tojson(sort_keys=true) }}`, `{"a": 2, "b": 1}`},
		{"indent", `{{ {"b": [1, {}], "a": "x"} | tojson(indent=2) }}`, "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": \"x\"\n}"},
		{"spaced pipe", `{{ 5 |  tojson }}`, `5`},
		{"small float", `{{ 0.00001 | tojson }}`, `1e-05`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := New(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(Input{Extra: map[string]any{"v": value}})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestPyFloat checks Python's float repr.
func TestPyFloat(t *testing.T) {
	tests := map[float64]string{
		0: "0.0", 1: "1.0", -2.5: "-2.5", 0.1: "0.1", 1e15: "1000000000000000.0", 1e16: "1e+16",
		1.5e-5: "1.5e-05", 0.0001: "0.0001", 1.7976931348623157e308: "1.7976931348623157e+308", 1e-300: "1e-300",
	}
	for f, want := range tests {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}
