package server

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/kvasir-llm/kvasir"
)

// kvPolicyField is a request's kv_policy: {"name": NAME, "budget_tokens": N, "sink_tokens":
// S, "window_tokens": W, "selection": "sequence" | "layer" | "head"}, every key optional; the keys left out take the server's
// --kv-policy settings (when it names the same policy) or the policy's defaults. The
// engine checks the whole (an unknown policy, a budget below sinks + window: 400).
type kvPolicyField struct {
	spec kvasir.KVPolicySpec
}

// UnmarshalJSON reads the object, refusing unknown keys and values that are not
// non-negative integers.
func (k *kvPolicyField) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return &fieldError{"kv_policy", `expected an object {"name", "budget_tokens", "sink_tokens", "window_tokens", "selection"}`}
	}
	k.spec = kvasir.KVPolicySpec{BudgetTokens: kvasir.KVPolicyUnset, SinkTokens: kvasir.KVPolicyUnset, WindowTokens: kvasir.KVPolicyUnset}
	for key, v := range raw {
		var dst *int
		switch key {
		case "name":
			if err := json.Unmarshal(v, &k.spec.Name); err != nil || k.spec.Name == "" {
				return &fieldError{"kv_policy", "name: expected a policy name (full, streaming)"}
			}
			continue
		case "selection":
			if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
				continue
			}
			if err := json.Unmarshal(v, &k.spec.Selection); err != nil || k.spec.Selection == "" {
				return &fieldError{"kv_policy", "selection: expected sequence, layer or head"}
			}
			continue
		case "budget_tokens":
			dst = &k.spec.BudgetTokens
		case "sink_tokens":
			dst = &k.spec.SinkTokens
		case "window_tokens":
			dst = &k.spec.WindowTokens
		default:
			return &fieldError{"kv_policy", "unknown key " + strconv.Quote(key) + " (have name, budget_tokens, sink_tokens, window_tokens, selection)"}
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
		if err != nil || n < 0 {
			return &fieldError{"kv_policy", key + ": expected a non-negative integer, got " + string(v)}
		}
		*dst = n
	}
	return nil
}

// request returns the policy for kvasir.Request.KVPolicy (nil when the field is absent).
func (k *kvPolicyField) request() *kvasir.KVPolicySpec {
	if k == nil {
		return nil
	}
	s := k.spec
	return &s
}
