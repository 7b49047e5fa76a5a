package server

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/kvasir-llm/kvasir"
)

// Structured output: the request fields of OpenAI (response_format), vLLM
// (structured_outputs, and the older guided_* fields) and llama.cpp (grammar, json_schema)
// that hold the output to a JSON Schema, any JSON object, a regular expression, a choice
// list or a grammar. At most one may be set; it is compiled (Engine.Constrain: cached, on
// the request's goroutine, never the engine's loop) into a processor of the request, and a
// constraint that cannot be compiled is a 400 saying what and where.

// constraintFields are the structured-output fields of completions and chat requests.
type constraintFields struct {
	ResponseFormat    *responseFormat    `json:"response_format"`
	StructuredOutputs *structuredOutputs `json:"structured_outputs"`
	// vLLM's older fields.
	GuidedJSON              json.RawMessage `json:"guided_json"`
	GuidedRegex             *string         `json:"guided_regex"`
	GuidedChoice            []string        `json:"guided_choice"`
	GuidedGrammar           *string         `json:"guided_grammar"`
	GuidedWhitespacePattern *string         `json:"guided_whitespace_pattern"`
	// llama.cpp's server fields.
	Grammar    *string         `json:"grammar"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

// structuredOutputs is vLLM's structured_outputs object.
type structuredOutputs struct {
	JSON              json.RawMessage `json:"json"`
	Regex             *string         `json:"regex"`
	Choice            []string        `json:"choice"`
	Grammar           *string         `json:"grammar"`
	JSONObject        bool            `json:"json_object"`
	WhitespacePattern *string         `json:"whitespace_pattern"`
	// DisableAnyWhitespace asks for compact JSON, which is kvasir's default anyway.
	DisableAnyWhitespace bool `json:"disable_any_whitespace"`
}

// constraint returns the structured output the request asks for (nil: none) and the field
// that asks for it, or a 400 when fields conflict or are malformed.
func (c *constraintFields) constraint() (*kvasir.StructuredOutput, string, *APIError) {
	type asked struct {
		param string
		out   kvasir.StructuredOutput
	}
	var all []asked
	add := func(param string, o kvasir.StructuredOutput) { all = append(all, asked{param, o}) }
	if f := c.ResponseFormat; f != nil {
		if apiErr := f.validate(); apiErr != nil {
			return nil, "", apiErr
		}
		switch f.Type {
		case "json_object":
			add("response_format", kvasir.StructuredOutput{JSONObject: true})
		case "json_schema":
			add("response_format.json_schema.schema", kvasir.StructuredOutput{JSONSchema: f.JSONSchema.Schema,
				Strict: f.JSONSchema.Strict != nil && *f.JSONSchema.Strict})
		}
	}
	if so := c.StructuredOutputs; so != nil {
		n := len(all)
		f := vllmForms{json: so.JSON, regex: so.Regex, choice: so.Choice, grammar: so.Grammar, ws: so.WhitespacePattern}
		if apiErr := f.add(add, "structured_outputs.json", "structured_outputs.regex", "structured_outputs.choice", "structured_outputs.grammar"); apiErr != nil {
			return nil, "", apiErr
		}
		if so.JSONObject {
			add("structured_outputs.json_object", kvasir.StructuredOutput{JSONObject: true, WhitespacePattern: f.whitespace()})
		}
		if len(all) == n {
			return nil, "", badRequest("structured_outputs", "structured_outputs needs one of json, regex, choice, grammar and json_object")
		}
	}
	guided := vllmForms{json: c.GuidedJSON, regex: c.GuidedRegex, choice: c.GuidedChoice, grammar: c.GuidedGrammar, ws: c.GuidedWhitespacePattern}
	if apiErr := guided.add(add, "guided_json", "guided_regex", "guided_choice", "guided_grammar"); apiErr != nil {
		return nil, "", apiErr
	}
	ws := guided.whitespace()
	if c.Grammar != nil && *c.Grammar != "" {
		add("grammar", kvasir.StructuredOutput{Grammar: *c.Grammar})
	}
	if len(c.JSONSchema) > 0 && string(c.JSONSchema) != "null" {
		schema, apiErr := schemaValue("json_schema", c.JSONSchema)
		if apiErr != nil {
			return nil, "", apiErr
		}
		// llama.cpp's server allows whitespace in the JSON it constrains; kvasir stays
		// compact unless asked (guided_whitespace_pattern applies here too).
		add("json_schema", kvasir.StructuredOutput{JSONSchema: schema, WhitespacePattern: ws})
	}
	switch len(all) {
	case 0:
		if c.GuidedWhitespacePattern != nil {
			return nil, "", badRequest("guided_whitespace_pattern", "guided_whitespace_pattern needs guided_json or json_schema")
		}
		return nil, "", nil
	case 1:
		return &all[0].out, all[0].param, nil
	}
	return nil, "", badRequest(all[1].param, "%s and %s both constrain the output: give one", all[0].param, all[1].param)
}

// vllmForms are the four constraints vLLM names in structured_outputs and in its older
// guided_* fields, with the whitespace pattern of its JSON.
type vllmForms struct {
	json           json.RawMessage
	regex, grammar *string
	choice         []string
	ws             *string
}

// whitespace returns the JSON whitespace pattern ("": none).
func (f vllmForms) whitespace() string {
	if f.ws == nil {
		return ""
	}
	return *f.ws
}

// add passes the forms that are set to add, under the field names given.
func (f vllmForms) add(add func(string, kvasir.StructuredOutput), jsonParam, regexParam, choiceParam, grammarParam string) *APIError {
	if len(f.json) > 0 && string(f.json) != "null" {
		schema, apiErr := schemaValue(jsonParam, f.json)
		if apiErr != nil {
			return apiErr
		}
		add(jsonParam, kvasir.StructuredOutput{JSONSchema: schema, WhitespacePattern: f.whitespace()})
	}
	if f.regex != nil {
		add(regexParam, kvasir.StructuredOutput{Regex: *f.regex})
	}
	if f.choice != nil {
		add(choiceParam, kvasir.StructuredOutput{Choice: f.choice})
	}
	if f.grammar != nil {
		add(grammarParam, kvasir.StructuredOutput{Grammar: *f.grammar})
	}
	return nil
}

// schemaValue returns a JSON Schema given as an object, or as a string holding one (vLLM
// takes both), or a 400.
func schemaValue(param string, raw json.RawMessage) (json.RawMessage, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest(param, "%s: %v", param, err)
		}
		raw = bytes.TrimSpace([]byte(s))
	}
	if len(raw) == 0 || (raw[0] != '{' && string(raw) != "true") || !json.Valid(raw) {
		return nil, badRequest(param, "%s must be a JSON Schema object", param)
	}
	return raw, nil
}

// constrain compiles the request's structured output, if any, into a processor; a
// constraint that cannot be compiled is a 400 naming the field.
func (s *Server) constrain(c *constraintFields) ([]kvasir.Processor, *APIError) {
	out, param, apiErr := c.constraint()
	if apiErr != nil || out == nil {
		return nil, apiErr
	}
	if !s.eng.HasTokenizer() {
		return nil, unsupportedParam(param, "%s needs the model's tokenizer, and this model has none", param)
	}
	proc, err := s.eng.Constrain(*out)
	if err != nil { // an ErrStructuredOutput: the request's constraint, not the server, is at fault
		e := badRequest(param, "%s: %s", param, strings.TrimPrefix(err.Error(), kvasir.ErrStructuredOutput.Error()+": "))
		e.Code = "invalid_structured_output"
		return nil, e
	}
	return []kvasir.Processor{proc}, nil
}
