package jsonschema

// Test helpers the external tests (package jsonschema_test) use.
var (
	BenchSchemas    = benchSchemas
	ValidatorFor    = validatorFor
	ValidatesSchema = validates
)
