package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
)

// A request field kvasir does not implement yet is refused with a 400 that names it, never
// accepted and ignored: a client that asks for JSON output must not take plain text for it. Fields that change nothing here, as they change nothing in vLLM,
// are accepted; docs/API.md lists both kinds.

// unsupportedParam is the 400 for a request field kvasir does not implement yet, with
// OpenAI's code for a parameter a model does not take.
func unsupportedParam(param, format string, args ...any) *APIError {
	e := badRequest(param, format, args...)
	e.Code = "unsupported_parameter"
	return e
}

// unsupportedValue is the 400 for a value of a field that kvasir does not implement yet.
func unsupportedValue(param, format string, args ...any) *APIError {
	e := badRequest(param, format, args...)
	e.Code = "unsupported_value"
	return e
}

// unimplementedFields are fields of OpenAI's or vLLM's requests that would change the
// output, that no kvasir request parses yet, and what each asks for. A request that sets one
// is refused; a field that a request type parses is never looked up here, so implementing
// one is adding it to that type. Other unknown fields are logged and ignored, as vLLM does.
var unimplementedFields = map[string]string{
	"functions":                  "the legacy functions API: use tools",
	"function_call":              "the legacy functions API: use tool_choice",
	"allowed_token_ids":          "restricting the vocabulary",
	"bad_words":                  "banning words",
	"logits_processors":          "custom logits processors",
	"truncate_prompt_tokens":     "prompt truncation",
	"return_tokens_as_token_ids": "token ids in logprobs",
}

// refuseUnimplemented answers the first (by name) of the unknown fields that is an
// unimplemented one set to a value; null, false, 0 and empty values ask for nothing.
func refuseUnimplemented(unknown map[string]json.RawMessage) *APIError {
	for _, name := range slices.Sorted(maps.Keys(unknown)) {
		what, ok := unimplementedFields[name]
		if !ok {
			continue
		}
		switch string(bytes.TrimSpace(unknown[name])) {
		case "null", "false", "0", `""`, "[]", "{}":
			continue
		}
		return unsupportedParam(name, "%s is not supported yet (%s)", name, what)
	}
	return nil
}

// checkContinueFinal refuses add_generation_prompt set to true beside
// continue_final_message, which would leave it unused (vLLM refuses the pair too).
func checkContinueFinal(addGen *bool, continueFinal bool) *APIError {
	if continueFinal && addGen != nil && *addGen {
		return badRequest("add_generation_prompt", "add_generation_prompt and continue_final_message cannot both be true: continuing the final message adds no generation prompt")
	}
	return nil
}
