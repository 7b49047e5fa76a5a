package kvasir

import "github.com/kvasir-llm/kvasir/internal/kvcache"

// KVPolicySpec names a KV policy and its settings (the --kv-policy flag; a request's
// kv_policy field, Request.KVPolicy): what a sequence keeps in its KV blocks. "full" keeps
// every token; "streaming" keeps SinkTokens attention sinks and a window of the latest
// blocks within BudgetTokens, dropping whole blocks between them and rotating the kept
// keys by their place in the cache (StreamingLLM), so that a sequence's KV memory stays
// within its budget and generation goes on past the model's context length. A setting of
// KVPolicyUnset takes the server's or the policy's default.
type KVPolicySpec = kvcache.PolicySpec

// KVPolicyUnset is the value of a KVPolicySpec setting that was not given.
const KVPolicyUnset = kvcache.Unset

// ParseKVPolicy parses NAME[:key=value,...] (keys budget_tokens, sink_tokens,
// window_tokens), the form of the --kv-policy flag.
func ParseKVPolicy(s string) (KVPolicySpec, error) { return kvcache.ParsePolicySpec(s) }

// CheckKVPolicy checks spec as an engine of blocks of blockSize tokens (0: the default)
// would: a known policy whose budget holds its sinks and window.
func CheckKVPolicy(spec KVPolicySpec, blockSize int) error {
	if blockSize == 0 {
		blockSize = kvcache.DefaultBlockSize
	}
	if spec.Name == "" {
		return nil
	}
	_, err := kvcache.NewPolicy(spec, blockSize)
	return err
}
