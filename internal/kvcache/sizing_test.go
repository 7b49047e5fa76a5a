package kvcache

import (
	"math"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name                                      string
		layers, kvHeads, headDim, elem, blockSize int
		memory                                    int64
		maxLen                                    int
		wantPerToken                              int64
		wantBlocks, wantPerSeq, wantConcurrent    int
		wantInString                              []string
	}{
		{
			name:   "smollm2-135m f16, 1 GiB",
			layers: 30, kvHeads: 3, headDim: 64, elem: 2, blockSize: 16, memory: 1 << 30, maxLen: 8192,
			wantPerToken: 23040, wantBlocks: 2912, wantPerSeq: 512, wantConcurrent: 5,
			wantInString: []string{"23040 B/token", "2 x 30 layers x 3 kv heads x 64 dim x 2 B", "360.00 KiB", "2911 blocks", "46576 tokens", "5.69x concurrency at 8192 tokens"},
		},
		{
			name:   "llama-7b f16, 16 GiB",
			layers: 32, kvHeads: 32, headDim: 128, elem: 2, blockSize: 16, memory: 16 << 30, maxLen: 4096,
			wantPerToken: 512 << 10, wantBlocks: 2048, wantPerSeq: 256, wantConcurrent: 7,
			wantInString: []string{"8.00 MiB", "2047 blocks"},
		},
		{
			name:   "stories260K f32, 1 MiB, uneven context",
			layers: 5, kvHeads: 4, headDim: 8, elem: 4, blockSize: 16, memory: 1 << 20, maxLen: 500,
			wantPerToken: 1280, wantBlocks: 51, wantPerSeq: 32, wantConcurrent: 1,
		},
	}
	for _, tc := range cases {
		s, err := Plan(tc.layers, tc.kvHeads, tc.headDim, tc.elem, tc.blockSize, tc.memory, tc.maxLen)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if s.BytesPerToken != tc.wantPerToken || s.NumBlocks != tc.wantBlocks || s.BlocksPerSequence != tc.wantPerSeq || s.MaxConcurrentFullContext != tc.wantConcurrent {
			t.Errorf("%s: got %+v", tc.name, s)
		}
		if s.BytesPerBlock != s.BytesPerToken*int64(tc.blockSize) || int64(s.NumBlocks)*s.BytesPerBlock > tc.memory {
			t.Errorf("%s: blocks exceed the budget: %+v", tc.name, s)
		}
		str := s.String()
		for _, want := range tc.wantInString {
			if !strings.Contains(str, want) {
				t.Errorf("%s: %q lacks %q", tc.name, str, want)
			}
		}
	}
}

func TestPlanErrors(t *testing.T) {
	cases := []struct {
		name   string
		args   [5]int
		memory int64
		maxLen int
		want   string
	}{
		{"zero layers", [5]int{0, 1, 1, 1, 16}, 1 << 20, 10, "must be positive"},
		{"negative block size", [5]int{1, 1, 1, 1, -16}, 1 << 20, 10, "must be positive"},
		{"zero max model len", [5]int{1, 1, 1, 1, 16}, 1 << 20, 0, "must be positive"},
		{"budget too small", [5]int{32, 32, 128, 2, 16}, 1 << 20, 10, "need at least 2"},
		{"negative budget", [5]int{1, 1, 1, 1, 16}, -5, 10, "need at least 2"},
		{"overflow", [5]int{1 << 30, 1 << 30, 1 << 30, 1 << 30, 16}, 1 << 40, 10, "overflow"},
		{"block overflow", [5]int{1, 1, 1, 1, 1 << 62}, 1 << 40, 10, "bytes per block (4611686018427387904 tokens x 2 bytes) overflow int64"},
	}
	for _, tc := range cases {
		_, err := Plan(tc.args[0], tc.args[1], tc.args[2], tc.args[3], tc.args[4], tc.memory, tc.maxLen)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestPlanHugeMaxModelLen: a context of 2^62 tokens sizes the pool by the budget and fits
// no full-context sequence; nothing wraps.
func TestPlanHugeMaxModelLen(t *testing.T) {
	s, err := Plan(1, 1, 1, 1, 16, 1<<40, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	// 2 bytes a token, 32 a block: 2^40 / 32 = 2^35 blocks, capped at MaxInt32.
	if s.NumBlocks != math.MaxInt32 || s.BlocksPerSequence != 1<<58 || s.MaxConcurrentFullContext != 0 {
		t.Errorf("plan %+v: want MaxInt32 blocks, 2^58 blocks a sequence, no full-context sequence", s)
	}
	if str := s.String(); strings.Contains(str, " -") {
		t.Errorf("log line %q has a negative number", str)
	}
}

// TestFullContextBytes: the bytes max-num-seqs full contexts need saturate at MaxInt64
// instead of wrapping negative.
func TestFullContextBytes(t *testing.T) {
	cases := []struct {
		perToken             int64
		maxLen, seqs, blocks int
		want                 int64
	}{
		{1280, 128, 1, 16, 1280*128 + 1280*16},
		{1280, 128, 4, 16, 1280*128*4 + 1280*16},
		{1280, 1 << 62, 256, 16, math.MaxInt64},
		{1 << 40, 1 << 20, 1 << 10, 16, math.MaxInt64},
		{1, math.MaxInt, 1, 1, math.MaxInt64},
		{1 << 20, 16, 1, 1 << 62, math.MaxInt64},
		{0, 128, 1, 16, 0},
		{1280, -1, 1, 16, 0},
	}
	for _, c := range cases {
		if got := FullContextBytes(c.perToken, c.maxLen, c.seqs, c.blocks); got != c.want {
			t.Errorf("FullContextBytes(%d, %d, %d, %d) = %d, want %d", c.perToken, c.maxLen, c.seqs, c.blocks, got, c.want)
		}
	}
}

// TestPlanWithDraft: a draft model's bytes per token shrink the pool of the same budget,
// and the log line says so.
func TestPlanWithDraft(t *testing.T) {
	// The trained pair in f32: target 6 layers x 4 KV heads x 64, draft 3 x 2 x 64.
	s, err := Plan(6, 4, 64, 4, 16, 64<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.WithDraft(2 * 3 * 2 * 64 * 4)
	if err != nil {
		t.Fatal(err)
	}
	if s.BytesPerToken != 12288 || d.BytesPerToken != 12288 || d.DraftBytesPerToken != 3072 {
		t.Errorf("bytes per token: %d, with the draft %d + %d", s.BytesPerToken, d.BytesPerToken, d.DraftBytesPerToken)
	}
	if d.BytesPerBlock != 15360*16 || d.NumBlocks != int((64<<20)/(15360*16)) || d.NumBlocks >= s.NumBlocks {
		t.Errorf("with the draft: %d blocks of %d bytes (without: %d)", d.NumBlocks, d.BytesPerBlock, s.NumBlocks)
	}
	if d.MaxConcurrentFullContext != (d.NumBlocks-1)/32 {
		t.Errorf("concurrency %d", d.MaxConcurrentFullContext)
	}
	if str := d.String(); !strings.Contains(str, "12288 B/token (2 x 6 layers x 4 kv heads x 64 dim x 4 B) + 3072 B/token of the draft model;") {
		t.Errorf("log line %q", str)
	}
	if str := s.String(); strings.Contains(str, "draft") {
		t.Errorf("log line without a draft %q", str)
	}
	if _, err := s.WithDraft(-1); err == nil {
		t.Error("negative draft bytes accepted")
	}
	if _, err := s.WithDraft(64 << 20); err == nil || !strings.Contains(err.Error(), "need at least 2") {
		t.Errorf("a draft too large for the budget: %v", err)
	}
}

// TestPlanValuesAreKeys: a cache whose values are its keys (DeepSeek-V2-Lite's MLA: 27
// layers of one 576-value vector, BF16) takes one vector a token and layer, 27 x 576 x 2 =
// 31104 bytes, and the budget holds twice the blocks of the keys-and-values plan.
func TestPlanValuesAreKeys(t *testing.T) {
	const mem = 1 << 30
	both, err := Plan(27, 1, 576, 2, 16, mem, 4096)
	if err != nil {
		t.Fatal(err)
	}
	once, err := both.ValuesAreKeys()
	if err != nil {
		t.Fatal(err)
	}
	if once.BytesPerToken != 27*576*2 || both.BytesPerToken != 2*27*576*2 {
		t.Errorf("bytes a token: %d keys only, %d keys and values; want %d and %d", once.BytesPerToken, both.BytesPerToken, 27*576*2, 2*27*576*2)
	}
	if want := int(int64(mem) / (27 * 576 * 2 * 16)); once.NumBlocks != want || once.NumBlocks < 2*both.NumBlocks {
		t.Errorf("%d blocks keys only (%d keys and values), want %d", once.NumBlocks, both.NumBlocks, want)
	}
	if s := once.String(); !strings.Contains(s, "31104 B/token (1 x 27 layers x 1 kv heads x 576 dim x 2 B)") {
		t.Errorf("log line %q", s)
	}
	if _, err := once.ValuesAreKeys(); err == nil {
		t.Error("a plan of one vector a token re-planned as keys only again without an error")
	}
}
