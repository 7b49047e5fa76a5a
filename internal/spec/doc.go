// Package spec holds speculative decoding's parts that sit above the engine's seams: the
// configuration a user gives (vLLM's --speculative-config JSON, config.go), the n-gram
// prompt-lookup proposer (ngram.go), and the policies that choose each step's draft lengths:
// dynamic speculation from measured acceptance and step costs (dynamic.go, with its cost
// models in cost.go and acceptance estimates in acceptance.go) or a fixed K (fixed.go).
// Package kvasir turns a Config into the engine's Speculation; nothing below it imports
// this package.
package spec
