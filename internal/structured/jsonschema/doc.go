// Package jsonschema compiles JSON Schema into a GBNF grammar (llama.cpp's dialect, start
// rule "root") whose strings are JSON texts the schema accepts, so that a grammar engine
// (internal/structured) can constrain a model to valid output.
//
// # What the grammar writes
//
// The grammar writes a subset of the valid JSON texts, never a text the schema rejects. Properties come in the schema's order; optional ones may be left
// out; whitespace between tokens is absent unless Options.WhitespacePattern allows a
// bounded amount. Strings are JSON strings (escapes allowed, no raw control characters,
// no lone surrogates), their length counted in characters. Integers have at most 15
// digits and no "-0"; other numbers at most 15 fraction digits and, when no bound applies,
// a two-digit exponent.
//
// # Keywords
//
// Enforced: type (also lists), nullable (OpenAPI), enum, const, properties, required,
// additionalProperties (false, true, a schema; absent means true unless
// Options.StrictProperties), patternProperties, minProperties, maxProperties,
// dependentRequired, dependentSchemas, dependencies, allOf (merged keyword by keyword),
// anyOf, oneOf (exclusive where decidable: see oneof.go), not (only {}, a type list,
// {"required": [...]}, or an enum or const of nulls, booleans, integers or values the rest
// of the schema refuses), $ref (JSON pointers and $anchor within the document, the
// document's own $id; recursion allowed), $defs/definitions, items, prefixItems,
// additionalItems, minItems, maxItems, contains (minContains 0 or 1), uniqueItems,
// propertyNames (a pattern only), pattern, format, minLength, maxLength, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum (numbers and draft 4 booleans), multipleOf
// (an integer m <= 64 without bounds, as a remainder automaton whose multiples are not
// capped at 15 digits; an integer over a bounded range of at most 256 multiples; a power
// of ten such as 0.01).
//
// Refused with an error naming the keyword and its JSON pointer: if, maxContains,
// minContains above 1, unevaluatedItems, unevaluatedProperties, $dynamicRef,
// $dynamicAnchor, $recursiveRef, $recursiveAnchor, references leaving the document,
// patterns with lookaround, backreferences or word boundaries, a oneOf whose branches
// overlap where the compiler cannot take the overlap away, and the combinations listed
// below. Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly, content*) and keys that are not
// JSON Schema keywords (x-..., typos) are ignored, as JSON Schema says.
//
// Approximations (the grammar writes fewer values than the schema allows):
//   - oneOf drops what it cannot prove exclusive but can prove shared: enum values
//     another branch matches, a type every value of which two branches match, objects
//     that have all of another "required"-only branch's properties; a string or number
//     branch keeps only the lengths or values outside another's range, even where
//     that one's pattern or multipleOf would let more through.
//   - contains: with minItems above 1 or maxItems, the matching element comes first.
//   - uniqueItems over items that are not a finite list of values: at most one element
//     (minItems at most 1; otherwise refused).
//   - propertyNames: extra keys are the pattern's strings, and none when a declared name
//     matches the pattern.
//   - Formats write a conservative subset: date (days that exist in every year), time and
//     date-time (RFC 3339, no leap second), email, uuid, uri/iri/uri-template,
//     uri-reference, hostname, ipv4, ipv6 (eight full groups), json-pointer,
//     relative-json-pointer, duration, semver, regex. Unknown formats are annotations;
//     "period" is refused. A pattern beside a format is supported only when it demands
//     literal prefixes (^https?://); a length bound beside a format only when the format
//     already satisfies it.
//   - Numeric bounds: integral values exactly; a value with a fraction only when its
//     whole integer part's unit interval lies within the bounds (so 1.5 <= x misses 1.7).
//   - Extra properties (where additionalProperties allows them) have printable ASCII keys
//     without escapes, never a declared name; with patternProperties, extra keys come only
//     from a pattern that no declared name matches, with values satisfying every pattern's
//     schema. Extra properties count as one toward minProperties (keys may repeat).
//   - A pattern with maxLength caps its repetitions to fit; with minLength it must already
//     be long enough, or be one repetition of single characters.
//   - uniqueItems writes each value of the finite list at most once, in the list's order.
package jsonschema
