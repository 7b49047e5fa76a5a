package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"
)

// SampleRequest is one request of a benchmark workload.
type SampleRequest struct {
	// Prompt is the text prompt (the user message on the chat endpoint). It is empty when
	// TokenIDs is sent instead.
	Prompt string
	// TokenIDs, when set, is sent as a token-id prompt to /v1/completions.
	TokenIDs []int
	// PromptLen is the expected number of input tokens (exact or estimated; the server's
	// usage report replaces it).
	PromptLen int
	// OutputLen is max_tokens.
	OutputLen int
	// Arrival is when a timed workload (a trace) sends the request, from the start.
	Arrival time.Duration
}

// Dataset names.
const (
	DatasetRandom           = "random"
	DatasetShareGPT         = "sharegpt"
	DatasetPrefixRepetition = "prefix-repetition"
	DatasetMooncake         = "mooncake"
)

// DatasetConfig says which workload to make, with vLLM's dataset options.
type DatasetConfig struct {
	Name       string // random, sharegpt, prefix-repetition or mooncake
	Path       string // the file of sharegpt and mooncake
	NumPrompts int
	Seed       uint64

	RandomInputLen   int
	RandomOutputLen  int
	RandomRangeRatio float64 // lengths are uniform in [L*(1-r), L*(1+r)]
	RandomPrefixLen  int     // random tokens shared by every prompt, before its own

	ShareGPTOutputLen int // 0: the reply's length (ShareGPTNoReplyLen without reply)
	// ShareGPTNoReplyLen is the output length of a conversation without a reply (0:
	// DefaultShareGPTOutputLen).
	ShareGPTNoReplyLen int

	PrefixLen   int // prefix-repetition: tokens of each shared prefix
	SuffixLen   int // prefix-repetition: tokens after the prefix, per request
	NumPrefixes int // prefix-repetition: distinct prefixes
	PrefixOut   int // prefix-repetition: output length

	MooncakeBlockSize int     // tokens per hash id (the trace's own is MooncakeTraceBlock)
	MooncakeTimeScale float64 // multiplies the trace's timestamps (0: 1)
	MooncakeMaxOutput int     // caps each request's output length (0: the trace's)
}

// DefaultShareGPTOutputLen is the output length of a ShareGPT conversation without a reply.
const DefaultShareGPTOutputLen = 128

// MooncakeTraceBlock is the prefix block size of the Mooncake trace's hash ids.
const MooncakeTraceBlock = 512

// Timed reports whether the dataset carries its own arrival times.
func (c DatasetConfig) Timed() bool { return c.Name == DatasetMooncake }

// LoadDataset makes the workload c names, prompts built by b.
func LoadDataset(ctx context.Context, c DatasetConfig, b *PromptBuilder) ([]SampleRequest, error) {
	if c.NumPrompts <= 0 {
		return nil, fmt.Errorf("dataset %s: --num-prompts %d: need at least 1", c.Name, c.NumPrompts)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x6b766173))
	switch c.Name {
	case DatasetRandom:
		return randomDataset(ctx, c, b, rng)
	case DatasetShareGPT:
		return shareGPTDataset(ctx, c, b, rng)
	case DatasetPrefixRepetition:
		return prefixRepetitionDataset(ctx, c, b, rng)
	case DatasetMooncake:
		return mooncakeDataset(ctx, c, b)
	}
	return nil, fmt.Errorf("dataset %q: want random, sharegpt, prefix-repetition or mooncake", c.Name)
}

// rangeLen draws a length uniformly from [floor(n*(1-r)), ceil(n*(1+r))], at least min.
func rangeLen(rng *rand.Rand, n int, r float64, least int) int {
	lo := int(math.Floor(float64(n) * (1 - r)))
	hi := int(math.Ceil(float64(n) * (1 + r)))
	v := lo
	if hi > lo {
		v = lo + rng.IntN(hi-lo+1)
	}
	return max(v, least)
}

func randomDataset(ctx context.Context, c DatasetConfig, b *PromptBuilder, rng *rand.Rand) ([]SampleRequest, error) {
	if c.RandomInputLen < 0 || c.RandomOutputLen <= 0 || c.RandomPrefixLen < 0 {
		return nil, fmt.Errorf("dataset random: --random-input-len %d --random-output-len %d --random-prefix-len %d: need lengths >= 0 and an output > 0",
			c.RandomInputLen, c.RandomOutputLen, c.RandomPrefixLen)
	}
	if c.RandomRangeRatio < 0 || c.RandomRangeRatio >= 1 {
		return nil, fmt.Errorf("dataset random: --random-range-ratio %g: need 0 <= r < 1", c.RandomRangeRatio)
	}
	prefix := b.Draw(rng, c.RandomPrefixLen)
	reqs := make([]SampleRequest, c.NumPrompts)
	for i := range reqs {
		in := rangeLen(rng, c.RandomInputLen, c.RandomRangeRatio, 0)
		if in+len(prefix) == 0 {
			in = 1
		}
		out := rangeLen(rng, c.RandomOutputLen, c.RandomRangeRatio, 1)
		ids := append(slices.Clone(prefix), b.Draw(rng, in)...)
		reqs[i].OutputLen = out
		if err := b.Build(ctx, ids, &reqs[i]); err != nil {
			return nil, fmt.Errorf("dataset random: %w", err)
		}
	}
	return reqs, nil
}

func prefixRepetitionDataset(ctx context.Context, c DatasetConfig, b *PromptBuilder, rng *rand.Rand) ([]SampleRequest, error) {
	if c.NumPrefixes <= 0 || c.PrefixLen < 0 || c.SuffixLen < 0 || c.PrefixLen+c.SuffixLen == 0 || c.PrefixOut <= 0 {
		return nil, fmt.Errorf("dataset prefix-repetition: prefix %d, suffix %d, %d prefixes, output %d: need positive sizes",
			c.PrefixLen, c.SuffixLen, c.NumPrefixes, c.PrefixOut)
	}
	prefixes := make([][]int, c.NumPrefixes)
	for i := range prefixes {
		prefixes[i] = b.Draw(rng, c.PrefixLen)
	}
	reqs := make([]SampleRequest, c.NumPrompts)
	for i := range reqs {
		// Each prefix takes an equal share of the requests, in turn.
		ids := append(slices.Clone(prefixes[i%c.NumPrefixes]), b.Draw(rng, c.SuffixLen)...)
		reqs[i].OutputLen = c.PrefixOut
		if err := b.Build(ctx, ids, &reqs[i]); err != nil {
			return nil, fmt.Errorf("dataset prefix-repetition: %w", err)
		}
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	return reqs, nil
}

// shareGPTEntry is one conversation of a ShareGPT file.
type shareGPTEntry struct {
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// shareGPTDataset takes the first human turn of conversations (shuffled by the seed) as
// prompts. The output length is --sharegpt-output-len, else the reply's token count (or
// ShareGPTNoReplyLen for a conversation without one); with the reply's length, vLLM's
// filter applies (prompt and reply at least 4 tokens, prompt at most 1024, both at most
// 2048). Fewer usable conversations than requests are repeated.
func shareGPTDataset(ctx context.Context, c DatasetConfig, b *PromptBuilder, rng *rand.Rand) ([]SampleRequest, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("dataset sharegpt: name the file with --dataset-path")
	}
	data, err := os.ReadFile(c.Path)
	if err != nil {
		return nil, fmt.Errorf("dataset sharegpt: %w", err)
	}
	var entries []shareGPTEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("dataset sharegpt %s: %w", c.Path, err)
	}
	rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	var reqs []SampleRequest
	for _, e := range entries {
		if len(reqs) == c.NumPrompts {
			break
		}
		if len(e.Conversations) == 0 || e.Conversations[0].Value == "" {
			continue
		}
		r := SampleRequest{Prompt: e.Conversations[0].Value}
		r.PromptLen = b.Count(ctx, r.Prompt)
		switch {
		case c.ShareGPTOutputLen > 0:
			r.OutputLen = c.ShareGPTOutputLen
		case len(e.Conversations) > 1:
			r.OutputLen = b.Count(ctx, e.Conversations[1].Value)
			if r.PromptLen < 4 || r.OutputLen < 4 || r.PromptLen > 1024 || r.PromptLen+r.OutputLen > 2048 {
				continue
			}
		case c.ShareGPTNoReplyLen > 0:
			r.OutputLen = c.ShareGPTNoReplyLen
		default:
			r.OutputLen = DefaultShareGPTOutputLen
		}
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("dataset sharegpt %s: no usable conversation", c.Path)
	}
	for i := 0; len(reqs) < c.NumPrompts; i++ {
		reqs = append(reqs, reqs[i])
	}
	return reqs, nil
}

// MooncakeEntry is one line of a Mooncake trace.
type MooncakeEntry struct {
	Timestamp    float64 `json:"timestamp"` // milliseconds from the trace's start
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int   `json:"hash_ids"` // one per 512-token prefix block
}

// ReadMooncake reads up to n entries (all when n <= 0) of a Mooncake trace file.
func ReadMooncake(path string, n int) ([]MooncakeEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mooncake trace: %w", err)
	}
	defer f.Close()
	var out []MooncakeEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan() && (n <= 0 || len(out) < n); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e MooncakeEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("mooncake trace %s:%d: %w", path, line, err)
		}
		if e.InputLength <= 0 || e.OutputLength < 0 || e.Timestamp < 0 {
			return nil, fmt.Errorf("mooncake trace %s:%d: input_length %d, output_length %d, timestamp %g",
				path, line, e.InputLength, e.OutputLength, e.Timestamp)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace %s: %w", path, err)
	}
	return out, nil
}

// mooncakeDataset replays a Mooncake trace: each hash id stands for one block of random
// tokens (the same tokens wherever the id appears, so prompts share prefixes as the trace
// says), the prompt is the request's blocks cut to its input length (scaled to the block
// size), and requests arrive at the trace's timestamps times the time scale.
func mooncakeDataset(ctx context.Context, c DatasetConfig, b *PromptBuilder) ([]SampleRequest, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("dataset mooncake: name the trace with --dataset-path")
	}
	block := c.MooncakeBlockSize
	if block <= 0 {
		block = MooncakeTraceBlock
	}
	scale := c.MooncakeTimeScale
	if scale == 0 {
		scale = 1
	}
	if scale < 0 {
		return nil, fmt.Errorf("dataset mooncake: time scale %g: need >= 0", scale)
	}
	entries, err := ReadMooncake(c.Path, c.NumPrompts)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("dataset mooncake %s: no requests", c.Path)
	}
	blocks := map[int][]int{}
	blockTokens := func(id int) []int {
		if t, ok := blocks[id]; ok {
			return t
		}
		t := b.Draw(rand.New(rand.NewPCG(c.Seed, uint64(id))), block)
		blocks[id] = t
		return t
	}
	t0 := entries[0].Timestamp
	reqs := make([]SampleRequest, len(entries))
	for i, e := range entries {
		in := max(1, (e.InputLength*block+MooncakeTraceBlock-1)/MooncakeTraceBlock)
		ids := make([]int, 0, in)
		for _, h := range e.HashIDs {
			if len(ids) >= in {
				break
			}
			ids = append(ids, blockTokens(h)...)
		}
		if len(ids) < in {
			ids = append(ids, b.Draw(rand.New(rand.NewPCG(c.Seed, uint64(1)<<40+uint64(i))), in-len(ids))...)
		}
		ids = ids[:in]
		reqs[i].OutputLen = max(1, e.OutputLength)
		if c.MooncakeMaxOutput > 0 {
			reqs[i].OutputLen = min(reqs[i].OutputLen, c.MooncakeMaxOutput)
		}
		ms := max(0, e.Timestamp-t0) * scale
		reqs[i].Arrival = time.Duration(ms * float64(time.Millisecond))
		if err := b.Build(ctx, ids, &reqs[i]); err != nil {
			return nil, fmt.Errorf("dataset mooncake: %w", err)
		}
	}
	return reqs, nil
}
