package jsonschema

import (
	"os"
	"testing"
)

// FuzzToGBNF feeds arbitrary bytes to the compiler: it must return a grammar or an error,
// never panic or hang, and every grammar it returns must parse in the grammar engine.
func FuzzToGBNF(f *testing.F) {
	seeds := []string{
		`{}`, `true`, `false`, `{"type":"string","maxLength":3}`, `{"$ref":"#"}`,
		`{"type":"object","properties":{"a":{"$ref":"#"}},"additionalProperties":false}`,
		`{"anyOf":[{"type":"integer","minimum":-5,"maximum":5},{"enum":["x",null]}]}`,
		`{"allOf":[{"properties":{"a":{"type":"string"}}},{"required":["a"],"additionalProperties":false}]}`,
		`{"type":"array","prefixItems":[{"const":1}],"items":{"type":"boolean"},"minItems":2,"maxItems":4}`,
		`{"type":"string","pattern":"^[a-z]{2,5}(-[0-9]+)?$","maxLength":8}`,
		`{"type":"string","format":"date-time"}`, `{"type":"number","multipleOf":0.01,"maximum":10}`,
		`{"patternProperties":{"^x-":{"type":"integer"}},"minProperties":1,"maxProperties":2}`,
		`{"dependencies":{"a":["b"]},"not":{"required":["c"]}}`,
		`{"type":"array","uniqueItems":true,"items":{"enum":[1,2,3]}}`,
		`{"$defs":{"n":{"type":["null","object"],"properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
		`{"oneOf":[{"properties":{"k":{"const":"a"}},"required":["k"]},{"properties":{"k":{"enum":["b"]}},"required":["k"]},{"type":"integer"},{"type":"number"}]}`,
		`{"type":"object","properties":{"a":{},"b":{}},"oneOf":[{"required":["a"]},{"required":["b"]}]}`,
		`{"oneOf":[{"$ref":"#"},{"type":"array","items":{"$ref":"#"}}]}`, `{"oneOf":[]}`, `{"anyOf":[]}`,
		`{"type":"integer","maximum":9,"not":{"enum":[1,2,3]},"oneOf":[{"minimum":5},{"maximum":4}]}`,
		`{"type":"array","contains":{"const":1},"items":{"type":"integer"},"maxItems":3}`,
		`{"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":{"type":"string"}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
	}
	if data, err := os.ReadFile("../../../../shared/testdata/structured/jsonschemabench/Github_easy/o12229.json"); err == nil {
		f.Add(data, true)
	}
	f.Fuzz(func(t *testing.T, schema []byte, ws bool) {
		opt := Options{}
		if ws {
			opt.WhitespacePattern = `[ \n]{0,2}`
		}
		g, err := ToGBNF(schema, opt)
		if err != nil {
			return
		}
		if len(g) > 1<<16 {
			return // large grammars take the engine long to compile; the compiler already returned
		}
		if _, err := compileMatcher(g); err != nil {
			t.Fatalf("schema %q: %v", schema, err)
		}
	})
}
