package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
)

func init() {
	registerBench(benchmark{name: "kvpool", summary: "TTFT of a second instance on a prefix another computed: through the shared KV pool against recomputing", run: benchKVPool})
}

// kvPoolResult is bench kvpool's summary.
type kvPoolResult struct {
	Model       string    `json:"model"`
	PrefixLen   int       `json:"prefix_len"`
	SuffixLen   int       `json:"suffix_len"`
	Rounds      int       `json:"rounds"`
	PoolTTFT    []float64 `json:"pool_ttft_s"`
	ComputeTTFT []float64 `json:"recompute_ttft_s"`
	// PoolMedian and ComputeMedian are the median TTFTs; Speedup their ratio.
	PoolMedian    float64 `json:"pool_ttft_median_s"`
	ComputeMedian float64 `json:"recompute_ttft_median_s"`
	Speedup       float64 `json:"speedup"`
	// CachedTokens is the prompt tokens the pool instance took from the pool, per round.
	CachedTokens int `json:"cached_tokens"`
	// SameTokens says whether both instances answered every round with the same greedy
	// tokens.
	SameTokens bool `json:"same_tokens"`
	// Writer and Reader are the pool counters of the first instance and of the second.
	Writer kvasir.KVPoolStats `json:"writer_pool"`
	Reader kvasir.KVPoolStats `json:"reader_pool"`
}

func benchKVPool(args []string) error {
	fs := newFlags("bench kvpool", "-m MODEL --kv-pool redis://HOST:PORT [--prefix-len 2000] [--suffix-len 16] [--rounds 3] [--json]")
	prefixLen := fs.Int("prefix-len", 2000, "tokens of the shared prefix")
	suffixLen := fs.Int("suffix-len", 16, "tokens after the prefix, new to the second instance")
	outLen := fs.Int("output-len", 4, "tokens generated per request (TTFT is to the first)")
	rounds := fs.Int("rounds", 3, "prefixes measured (each new to both measured instances)")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	ef := addEngineFlags(fs, allEngineFlags)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ef.model == "" || ef.kvPool == "" || fs.NArg() > 0 || *prefixLen < 1 || *suffixLen < 1 || *rounds < 1 || *outLen < 1 {
		fs.Usage()
		return fmt.Errorf("need -m and --kv-pool (and positive lengths and rounds)")
	}
	need := *prefixLen + *suffixLen + *outLen
	open := func(pool bool) (*kvasir.Engine, error) {
		return ef.openEngine(func(opt *kvasir.Options, fm *format.Model) {
			if !pool {
				opt.KVPool, opt.KVOffloadMemory = "", 0
			}
			if opt.MaxModelLen == 0 {
				opt.MaxModelLen = need + 64
			}
			opt.MaxNumSeqs = 1
		})
	}
	// The first instance computes every round's prefix (with a suffix of its own) and
	// leaves its blocks in the pool.
	first, err := open(true)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, first.KVCacheSizing())
	res := kvPoolResult{Model: first.ModelName(), PrefixLen: *prefixLen, SuffixLen: *suffixLen, Rounds: *rounds, SameTokens: true}
	rng := rand.New(rand.NewPCG(20, 2))
	vocab := int32(first.VocabSize())
	randTokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = rng.Int32N(vocab)
		}
		return t
	}
	// Each prefix's writes are waited for before the next prefill: a GPU computes a prefix
	// faster than Redis takes it, and the writer's bounded queue would drop the excess.
	prefixes := make([][]int32, *rounds)
	for r := range prefixes {
		prefixes[r] = randTokens(*prefixLen)
		if _, _, _, err := timeFirstToken(first, append(slices.Clone(prefixes[r]), randTokens(*suffixLen)...), *outLen); err != nil {
			first.Close()
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = first.FlushKVPool(ctx)
		cancel()
		if err != nil {
			first.Close()
			return fmt.Errorf("writing the pool: %w", err)
		}
	}
	res.Writer, _ = first.KVPoolStats()
	first.Close()

	// Then a second instance with the pool and a third without serve the same prompts,
	// round by round, alternating which goes first.
	pooled, err := open(true)
	if err != nil {
		return err
	}
	defer pooled.Close()
	local, err := open(false)
	if err != nil {
		return err
	}
	defer local.Close()
	for r, prefix := range prefixes {
		prompt := append(slices.Clone(prefix), randTokens(*suffixLen)...)
		order := []*kvasir.Engine{pooled, local}
		if r%2 == 1 {
			order = []*kvasir.Engine{local, pooled}
		}
		var toks [2][]int32
		for _, e := range order {
			ttft, got, usage, err := timeFirstToken(e, prompt, *outLen)
			if err != nil {
				return err
			}
			if e == pooled {
				res.PoolTTFT = append(res.PoolTTFT, ttft.Seconds())
				res.CachedTokens = usage.CachedPromptTokens
				toks[0] = got
			} else {
				res.ComputeTTFT = append(res.ComputeTTFT, ttft.Seconds())
				toks[1] = got
			}
		}
		res.SameTokens = res.SameTokens && slices.Equal(toks[0], toks[1])
	}
	res.Reader, _ = pooled.KVPoolStats()
	res.PoolMedian, res.ComputeMedian = median(res.PoolTTFT), median(res.ComputeTTFT)
	if res.PoolMedian > 0 {
		res.Speedup = res.ComputeMedian / res.PoolMedian
	}
	if *asJSON {
		return printJSON(res)
	}
	fmt.Printf("model %s, prefix %d tokens + suffix %d, %d rounds\n", res.Model, res.PrefixLen, res.SuffixLen, res.Rounds)
	fmt.Printf("TTFT through the pool: median %.1f ms %v (cached %d tokens of the last round)\n", 1e3*res.PoolMedian, msList(res.PoolTTFT), res.CachedTokens)
	fmt.Printf("TTFT recomputing:      median %.1f ms %v\n", 1e3*res.ComputeMedian, msList(res.ComputeTTFT))
	fmt.Printf("speedup %.1fx; same greedy tokens: %v\n", res.Speedup, res.SameTokens)
	w, r := res.Writer, res.Reader
	fmt.Printf("pool: first instance wrote %.1f MB (%d blocks dropped, %d errors); second read %.1f MB, %d hits, %d misses, %d errors, %d corrupt\n",
		float64(w.WrittenBytes)/1e6, w.DroppedWrites, w.Errors, float64(r.ReadBytes)/1e6, r.Hits, r.Misses, r.Errors, r.Corrupt)
	return nil
}

// timeFirstToken runs a greedy request of outLen tokens and returns the time to its first
// token, its tokens and its usage.
func timeFirstToken(e *kvasir.Engine, prompt []int32, outLen int) (time.Duration, []int32, kvasir.Usage, error) {
	start := time.Now()
	ch, err := e.Generate(context.Background(), kvasir.Request{PromptTokens: prompt, Params: kvasir.SamplingParams{MaxTokens: outLen}})
	if err != nil {
		return 0, nil, kvasir.Usage{}, err
	}
	var ttft time.Duration
	var toks []int32
	var last kvasir.Output
	for o := range ch {
		if o.Err != nil {
			return 0, nil, kvasir.Usage{}, o.Err
		}
		if ttft == 0 && len(o.TokenIDs) > 0 {
			ttft = time.Since(start)
		}
		toks = append(toks, o.TokenIDs...)
		last = o
	}
	return ttft, toks, last.Usage, nil
}

// median returns the median of xs (the mean of the middle two of an even count; 0 for
// none), for the bench commands that repeat a measurement.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func msList(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.1f", 1e3*x)
	}
	return out
}
