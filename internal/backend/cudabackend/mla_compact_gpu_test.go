package cudabackend_test

import (
	"fmt"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestBackendMLACompactKeys: a KV policy's compaction (KVCache.CompactKeys, which h2o and
// snapkv run) and shift (ShiftKeys, streaming's) of an MLA cache on the GPU, [kr | c] a
// token, rotating kr alone. In a one-layer deepseek-v2-tiny a token's cached vector
// depends on the token and its position only, so the kept tokens prefilled alone at
// positions 0..n-1 are the exact recomputation: the next token's logits over the
// compacted GPU cache equal those over the recomputed one (within 1e-4) and the CPU's over
// its own compacted cache, one list for the layer or one per lane; slots moved unrotated
// give other logits (the check can fail).
func TestBackendMLACompactKeys(t *testing.T) {
	be := newBackend(t)
	shape, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers = 1
	fm, err := synth.Model(shape, quant.F32, 9)
	if err != nil {
		t.Fatal(err)
	}
	const bs, n = 4, 11
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(3 + i*23%250)
	}
	keep := []int{0, 1, 4, 5, 7, 8, 10}
	var kept []int32
	for _, s := range keep {
		kept = append(kept, tokens[s])
	}
	type side struct {
		m  *model.Model
		kv *model.KVCache
	}
	open := func(b backend.Backend) side {
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{b}, KVCacheDType: quant.F32})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := m.NewKVCache(16, bs)
		if err != nil {
			t.Fatal(err)
		}
		return side{m, kv}
	}
	prefill := func(s side, table []int32, toks []int32, pos0 int) {
		b := &model.Batch{Seqs: []model.Seq{{BlockTable: table, QueryLen: len(toks), ContextLen: len(toks)}}}
		for i, tok := range toks {
			b.Tokens = append(b.Tokens, tok)
			b.Positions = append(b.Positions, int32(pos0+i))
			b.SlotMapping = append(b.SlotMapping, table[i/bs]*bs+int32(i%bs))
		}
		if _, err := s.m.Forward(b, s.kv); err != nil {
			t.Fatal(err)
		}
	}
	decode := func(s side, table []int32, pos int) []float32 {
		b := &model.Batch{Tokens: []int32{77}, Positions: []int32{int32(pos)}, SlotMapping: []int32{table[pos/bs]*bs + int32(pos%bs)},
			Seqs: []model.Seq{{BlockTable: table, QueryLen: 1, ContextLen: pos + 1}}, LogitsIndices: []int{0}}
		logits, err := s.m.Forward(b, s.kv)
		if err != nil {
			t.Fatal(err)
		}
		return logits
	}
	read := func(s side, blocks []int32) []byte {
		buf := make([]byte, len(blocks)*s.kv.BlockBytes())
		if err := s.kv.ReadBlocks(blocks, buf); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	src, dst, ref := []int32{3, 8, 1}, []int32{5, 10}, []int32{12, 13}
	gpu, cpu := open(be), open(cpubackend.New(0))
	lanes := gpu.m.AttentionMassLanes()
	prefill(gpu, ref, kept, 0)
	want := decode(gpu, ref, len(keep))
	for _, lists := range [][][]int{{keep}, make([][]int, max(lanes, 1))} {
		for i := range lists {
			lists[i] = keep
		}
		name := fmt.Sprintf("%d lists", len(lists))
		var got [2][]float32
		for i, s := range []side{gpu, cpu} {
			prefill(s, src, tokens, 0)
			if err := s.kv.CompactKeys(read(s, src), lists, dst); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got[i] = decode(s, dst, len(keep))
		}
		if e := relErr(got[0], want); e > 1e-4 {
			t.Errorf("%s: GPU logits over the compacted cache %.3g from the kept tokens' own prefill", name, e)
		}
		if e := relErr(got[0], got[1]); e > 1e-4 {
			t.Errorf("%s: GPU logits over the compacted cache %.3g from the CPU's", name, e)
		}
	}
	// Streaming's shift: the kept tokens computed at 40.. and shifted by -40.
	prefill(gpu, src, kept, 40)
	if err := gpu.kv.ShiftKeys(src, -40); err != nil {
		t.Fatal(err)
	}
	if e := relErr(decode(gpu, src, len(keep)), want); e > 1e-4 {
		t.Errorf("shifted keys: logits %.3g from the unshifted prefill's", e)
	}
	// Unrotated moves: the slots copied as they are.
	prefill(gpu, src, tokens, 0)
	raw := read(gpu, src)
	moved := make([]byte, len(dst)*gpu.kv.BlockBytes())
	row := gpu.kv.BlockBytes() / bs // one layer, one vector a token
	for i, from := range keep {
		copy(moved[i/bs*gpu.kv.BlockBytes()+i%bs*row:][:row], raw[from/bs*gpu.kv.BlockBytes()+from%bs*row:][:row])
	}
	if err := gpu.kv.WriteBlocks(dst, moved); err != nil {
		t.Fatal(err)
	}
	if u := relErr(decode(gpu, dst, len(keep)), want); u < 1e-2 {
		t.Errorf("unrotated moves give logits only %.3g from the recomputation: the test shows nothing", u)
	}
}
