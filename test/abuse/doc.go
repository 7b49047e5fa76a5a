// Package abuse is kvasir's abuse test suite (issue 14: no single request, connection or
// model file may stall or kill the server). It has no code of its own: its tests build the
// kvasir binary once, start `kvasir serve` on 127.0.0.1 (port 0, a small model from
// ../shared/testdata and hostile fixtures written at run time) and replay, one subtest each,
// every case of the table as an attacker would send it.
//
// Each case must end in a clear 4xx in OpenAI's error shape naming the parameter or limit
// (or, for a model file or a flag, a command that exits with an error naming it) within 1 s,
// with less than 50 MB of extra server memory (the server's peak resident set, read from
// /proc/PID/status around the case), while ordinary requests sent at the same time keep a
// p99 latency within 2x of the idle server's, and the server must still be alive and
// healthy afterwards. Stalled-body and non-reading stream clients (300 each) must leave
// /health answering in under 100 ms and be reclaimed within the server's deadlines, with
// the goroutine count (go_goroutines on /metrics) back to its baseline and the KV cache
// empty (kvasir:kv_cache_usage_perc 0).
//
// Run it with
//
//	go test -count=1 ./test/abuse
//
// (scripts/test.sh runs it on its own, after the other packages, so that its latency
// figures are not taken while other tests load the machine). It needs Linux (/proc) and
// the shared test models.
package abuse
