package jsonschema

// How the compiler treats each key of a schema object.
type keywordKind int

const (
	// unknownKeyword: not a JSON Schema keyword (x-..., a typo, a custom extension); JSON
	// Schema says such keys are annotations, so it is ignored.
	unknownKeyword keywordKind = iota
	// annotation: a JSON Schema keyword that never constrains an instance.
	annotation
	// supported: a validation or applicator keyword the grammar enforces.
	supported
	// unsupported: a JSON Schema keyword the grammar cannot enforce; a schema using it is
	// refused.
	unsupported
)

// classify says what the compiler does with key k of a schema object (drafts 4 to 2020-12
// and OpenAPI's nullable).
func classify(k string) keywordKind {
	switch k {
	case "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", "contentMediaType", "contentEncoding", "contentSchema", "discriminator", "xml", "externalDocs", "$vocabulary":
		return annotation
	case "type", "enum", "const", "nullable", "$ref", "allOf", "anyOf", "oneOf", "not", "properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "contains", "minContains", "maxContains", "propertyNames":
		return supported
	case "if", "unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor":
		return unsupported
	case "then", "else":
		// These act only beside "if", which is refused; alone they are no-ops.
		return annotation
	}
	return unknownKeyword
}
