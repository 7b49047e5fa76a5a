package jsonschema

import (
	"strings"
	"testing"
)

// TestOneOfExclusive checks that a compiled oneOf writes only values matching exactly one
// branch: every instance the grammar accepts must pass the validator library (so none
// matching two branches), and the instances listed as written must be accepted.
func TestOneOfExclusive(t *testing.T) {
	cases := []struct {
		name, schema     string
		written, refused []string // refused: each matches several branches or none
	}{
		{"const discriminator", `{"oneOf":[
			{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"integer"}},"required":["kind","r"],"additionalProperties":false},
			{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"integer"}},"required":["kind","side"],"additionalProperties":false}]}`,
			[]string{`{"kind":"circle","r":1}`, `{"kind":"square","side":2}`},
			[]string{`{"kind":"circle","side":2}`}},
		{"types", `{"oneOf":[{"type":"string"},{"type":"null"},{"type":"array","items":{"type":"integer"}}]}`,
			[]string{`"a"`, `null`, `[1,2]`}, []string{`1`, `{}`}},
		{"integer and number: only fractions", `{"oneOf":[{"type":"integer"},{"type":"number"}]}`,
			[]string{`1.5`, `-0.25`}, []string{`1`, `0`, `"x"`}},
		{"enum values the other branch refuses", `{"oneOf":[{"enum":["a","b",3]},{"enum":["b","c"]},{"type":"boolean"}]}`,
			[]string{`"a"`, `3`, `"c"`, `true`}, []string{`"b"`, `4`}},
		{"required lists", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"oneOf":[{"required":["a"]},{"required":["b"]}]}`,
			[]string{`{"a":1}`, `{"b":2}`}, []string{`{"a":1,"b":2}`, `{}`}},
		{"closed objects with optional properties", `{"oneOf":[
			{"type":"object","properties":{"ps":{"type":"string"}},"additionalProperties":false},
			{"type":"object","properties":{"sh":{"type":"string"}},"additionalProperties":false}]}`,
			[]string{`{"ps":"x"}`, `{"sh":"y"}`}, []string{`{}`}},
		{"string lengths", `{"type":"string","oneOf":[{"maxLength":2},{"minLength":4}]}`,
			[]string{`"ab"`, `"abcd"`}, []string{`"abc"`}},
		{"integer beside a minimum", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`,
			[]string{`1`, `-5`, `2.5`, `"x"`, `null`}, []string{`2`, `3`}},
		{"overlapping lengths", `{"type":"string","oneOf":[{"minLength":2},{"maxLength":4}]}`,
			[]string{`"a"`, `""`, `"abcde"`}, []string{`"ab"`, `"abcd"`}},
		{"overlapping numeric ranges", `{"type":"number","oneOf":[{"minimum":0,"maximum":10},{"exclusiveMinimum":5}]}`,
			[]string{`0`, `5`, `4.5`, `11`, `10.5`}, []string{`6`, `10`, `-1`}},
		{"string prefixes", `{"type":"string","oneOf":[{"pattern":"^id:"},{"pattern":"^key:"}]}`,
			[]string{`"id:12"`, `"key:1"`}, []string{`"other"`}},
		{"numeric ranges", `{"type":"integer","oneOf":[{"maximum":9},{"minimum":10,"maximum":99},{"exclusiveMinimum":99}]}`,
			[]string{`5`, `10`, `99`, `100`}, nil},
		{"nested discriminator", `{"type":"object","properties":{"shape":{"oneOf":[
			{"type":"object","properties":{"t":{"enum":["a"]}},"required":["t"]},
			{"type":"object","properties":{"t":{"enum":["b"]}},"required":["t"]}]}},"required":["shape"]}`,
			[]string{`{"shape":{"t":"a"}}`, `{"shape":{"t":"b"}}`}, []string{`{"shape":{"t":"c"}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gbnf, err := ToGBNF([]byte(tc.schema), Options{})
			if err != nil {
				t.Fatal(err)
			}
			match, err := compileMatcher(gbnf)
			if err != nil {
				t.Fatal(err)
			}
			sch, err := validatorFor([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range tc.written {
				if validates(sch, in) != nil {
					t.Fatalf("test case: %s is not valid", in)
				}
				if !match(in) {
					t.Errorf("%s not written\n%s", in, gbnf)
				}
			}
			for _, in := range tc.refused {
				if validates(sch, in) == nil {
					t.Fatalf("test case: %s is valid", in)
				}
				if match(in) {
					t.Errorf("%s (invalid) written\n%s", in, gbnf)
				}
			}
			// Every string the grammar writes must be valid: sample it.
			g, err := compileSchema([]byte(tc.schema), Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := newSampler(g, uint64(len(tc.name)))
			for range 200 {
				if out := s.sample(); validates(sch, out) != nil {
					t.Errorf("sample %s fails the schema: %v", out, validates(sch, out))
				}
			}
		})
	}
}

// TestOneOfUndecidable checks that branches whose overlap the compiler cannot take away
// are refused naming oneOf and its pointer, not compiled as anyOf.
func TestOneOfUndecidable(t *testing.T) {
	for _, schema := range []string{
		`{"oneOf":[{"type":"integer"},{"multipleOf":2}]}`,
		`{"properties":{"a":{"oneOf":[{"type":"string","maxLength":5},{"type":"string","pattern":"^a"}]}}}`,
		`{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"string"}}}]}`,
	} {
		_, err := ToGBNF([]byte(schema), Options{})
		if err == nil || !strings.Contains(err.Error(), "/oneOf: oneOf: branches") || !strings.Contains(err.Error(), "not decidable") {
			t.Errorf("%s: error %v, want a refusal naming oneOf", schema, err)
		}
	}
	if _, err := ToGBNF([]byte(`{"properties":{"a":{"oneOf":[{"type":"string","maxLength":5},{"type":"string","pattern":"^a"}]}}}`), Options{}); err == nil || !strings.Contains(err.Error(), "#/properties/a/oneOf") {
		t.Errorf("error %v does not name #/properties/a/oneOf", err)
	}
}

// TestNotEnumContainsPropertyNames checks not with enum or const, contains and
// propertyNames against the validator: what the grammar writes is valid, the listed
// instances are written, the invalid ones are not.
func TestNotEnumContainsPropertyNames(t *testing.T) {
	cases := []struct {
		name, schema     string
		written, refused []string
	}{
		{"not enum in a range", `{"type":"integer","minimum":1,"maximum":20,"not":{"enum":[1,7,20,99]}}`,
			[]string{`2`, `6`, `8`, `19`}, []string{`1`, `7`, `20`, `0`}},
		{"not const unbounded", `{"type":["integer","null","boolean"],"not":{"enum":[0,null,false]}}`,
			[]string{`1`, `-1`, `true`}, []string{`0`, `null`, `false`}},
		{"not beside enum", `{"enum":["a","b","c"],"not":{"const":"b"}}`,
			[]string{`"a"`, `"c"`}, []string{`"b"`}},
		{"contains anywhere", `{"type":"array","items":{"enum":["x","y","type"]},"contains":{"const":"type"}}`,
			[]string{`["type"]`, `["x","type","y"]`, `["y","y","type"]`}, []string{`[]`, `["x","y"]`}},
		{"contains first with bounds", `{"type":"array","items":{"type":"integer"},"contains":{"minimum":5},"minItems":2,"maxItems":3}`,
			[]string{`[5,1]`, `[9,1,2]`}, []string{`[5]`, `[1,2]`, `[5,1,2,3]`}},
		{"propertyNames pattern", `{"type":"object","properties":{"A_1":{"type":"integer"},"bad-name":{"type":"integer"}},"propertyNames":{"pattern":"^[A-Za-z_][A-Za-z0-9_]*$"}}`,
			[]string{`{"A_1":1}`, `{}`}, []string{`{"bad-name":1}`}},
		{"uniqueItems over strings: one element", `{"type":"array","items":{"type":"string"},"uniqueItems":true}`,
			[]string{`[]`, `["a"]`}, []string{`["a","a"]`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gbnf, err := ToGBNF([]byte(tc.schema), Options{})
			if err != nil {
				t.Fatal(err)
			}
			match, err := compileMatcher(gbnf)
			if err != nil {
				t.Fatal(err)
			}
			sch, err := validatorFor([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range tc.written {
				if validates(sch, in) != nil || !match(in) {
					t.Errorf("%s: valid %v, written %v\n%s", in, validates(sch, in) == nil, match(in), gbnf)
				}
			}
			for _, in := range tc.refused {
				if validates(sch, in) == nil {
					t.Fatalf("test case: %s is valid", in)
				}
				if match(in) {
					t.Errorf("%s (invalid) written\n%s", in, gbnf)
				}
			}
			g, err := compileSchema([]byte(tc.schema), Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := newSampler(g, uint64(len(tc.name)))
			for range 200 {
				if out := s.sample(); validates(sch, out) != nil {
					t.Errorf("sample %s fails the schema: %v", out, validates(sch, out))
				}
			}
		})
	}
}
