// Package kvpool keeps KV blocks beyond one engine's cache, in two tiers under it: a
// host-memory tier for the blocks the engine's cache evicts, and a pool on a Redis server
// that every instance of a model shares.
//
// # Keys
//
// A block is named by its chained hash (kvcache.DefaultHash: parent hash, tokens, cache
// salt), so one key covers the block and everything before it, under a namespace of the
// model: the model's identity and everything that shapes a block's bytes (block size, KV
// element type, split). Two instances that share a namespace exchange blocks byte for byte
// (model.KVCache.ReadBlocks and WriteBlocks); instances of another model or layout never
// see them. The salt enters through the hash, so tenants with distinct salts share nothing.
//
// # Values
//
// A value in Redis carries, besides the block's keys and values, its hash, its parent's
// hash and its token ids, and ends with a CRC-32C of all of it (value.go). A lookup checks
// all of them: a value damaged in the store or in transit, or one stored under the wrong
// key, is a miss (counted as corrupt and deleted), and the engine recomputes the block.
//
// # The write and read paths
//
// Blocks the engine computes are offered with Save, which never blocks: a writer goroutine
// sends them to Redis in pipelines (SET NX: the first copy stays), dropping what does not
// fit its queue. On admission, after the local prefix cache's longest hit, the engine asks
// Lookup for the blocks that follow: the host tier first, then one MGET per batch of keys
// for the rest, stopping at the first miss, since a later block is of no use without every
// block before it. Eviction is Redis's own: run it with maxmemory and
// maxmemory-policy allkeys-lru; the host tier is an LRU of its own size.
//
// # Failure
//
// The pool is an accelerator, never a dependency. Every call to Redis has a deadline, and a
// circuit breaker (breaker.go) stops calling after a run of failures, letting one call
// through after a cool-down to see whether the server is back. While Redis is down or slow
// the engine serves from its own cache and recomputes; the pool logs a warning when it
// opens the breaker and counts every failure (Stats), and never returns an error to a
// request.
package kvpool
