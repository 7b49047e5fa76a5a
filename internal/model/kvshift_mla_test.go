package model

import (
	"fmt"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestCompactKeysMLA: an MLA model's cache holds one vector a token, [kr | c] (the rotated
// key, then the latent, which no position touches), and a KV policy's compaction rotates
// only kr. In a one-layer model a token's cached vector depends on the token and its
// position alone, so the kept tokens prefilled by themselves at positions 0..n-1 are the
// exact recomputation of a compacted cache: the compacted vectors equal theirs, and the
// next token attends over both alike (its logits agree). Compaction that left the keys
// unrotated, or rotated the latent too, would fail both. Plain and YaRN RoPE (DeepSeek's
// scaled scores), f32 and f16 caches, one list for the layer or one per lane (h2o's); and
// ShiftKeys (streaming's whole-block drop) the same way.
func TestCompactKeysMLA(t *testing.T) {
	const bs, n = 4, 11
	tokens := testTokens(n)
	keep := []int{0, 1, 4, 5, 7, 8, 10} // slots 2, 3, 6 and 9 go
	var kept []int32
	for _, s := range keep {
		kept = append(kept, tokens[s])
	}
	s, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	base := smallConfig(s.Config)
	base.Layers = 1 // the leading dense layer
	yarn := base
	yarn.Scaling = format.RopeScaling{Type: "yarn", Factor: 40, OriginalContextLen: 8, BetaFast: 32, BetaSlow: 1,
		MScale: 0.707, MScaleAllDim: 0.707, AttnFactor: 1}
	for name, c := range map[string]format.Config{"rope": base, "yarn": yarn} {
		fm := writeTwin(t, c, quant.F32, synth.GGUF)
		for _, dt := range []quant.Type{quant.F32, quant.F16} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				m := cpuModel(t, fm, Parallel{1, 1}, dt)
				kv, err := m.NewKVCache(16, bs)
				if err != nil {
					t.Fatal(err)
				}
				spec := kv.parts[0].Spec()
				if !spec.ValuesAreKeys || spec.HeadDim != c.RopeDim+c.KVLoRARank || kv.massLanes() != 1 {
					t.Fatalf("cache spec %+v, %d lanes: not one [kr | c] vector a token", spec, kv.massLanes())
				}
				read := func(blocks []int32) []byte {
					buf := make([]byte, len(blocks)*kv.BlockBytes())
					if err := kv.ReadBlocks(blocks, buf); err != nil {
						t.Fatal(err)
					}
					return buf
				}
				src, dst, ref := []int32{3, 8, 1}, []int32{5, 10}, []int32{12, 13}
				prefillAt(t, m, kv, ref, kept, 0)
				want := read(ref)
				wantLogits := decodeAt(t, m, kv, ref, 77, len(keep))
				tol := map[quant.Type]float64{quant.F32: 1e-5, quant.F16: 2e-3}[dt]
				for _, lists := range [][][]int{{keep}, make([][]int, kv.massLanes())} {
					for i := range lists {
						lists[i] = keep
					}
					prefillAt(t, m, kv, src, tokens, 0)
					raw := read(src)
					if err := kv.CompactKeys(raw, lists, dst); err != nil {
						t.Fatal(err)
					}
					got := read(dst)
					eb := dt.BlockBytes()
					rd, moved := c.RopeDim, 0
					for i, from := range keep {
						at := i/bs*kv.BlockBytes() + i%bs*spec.HeadDim*eb
						g, w := decode(got[at:][:spec.HeadDim*eb], dt), decode(want[at:][:spec.HeadDim*eb], dt)
						if e := maxRel(g[:rd], w[:rd]); e > tol {
							t.Errorf("%d lists: kept token %d (slot %d) at %d: kr %.3g from the kept tokens' own prefill", len(lists), i, from, i, e)
						}
						if e := maxRel(g[rd:], w[rd:]); e > tol {
							t.Errorf("%d lists: kept token %d: latent %.3g from the kept tokens' own prefill", len(lists), i, e)
						}
						// The latent is copied as it was: bit for bit the source slot's.
						sat := from/bs*kv.BlockBytes() + from%bs*spec.HeadDim*eb
						if l := decode(raw[sat:][:spec.HeadDim*eb], dt)[rd:]; maxRel(g[rd:], l) != 0 {
							t.Errorf("%d lists: kept token %d: the latent changed in the move", len(lists), i)
						}
						if from != i {
							moved++
						}
					}
					if moved == 0 {
						t.Fatal("no token moved: the test shows nothing")
					}
					gotLogits := decodeAt(t, m, kv, dst, 77, len(keep))
					e := relErr([][]float32{gotLogits}, [][]float32{wantLogits})
					if e > 10*tol {
						t.Errorf("%d lists: next-token logits over the compacted cache %.3g from those over the kept tokens' prefill", len(lists), e)
					}
				}
				// Unrotated moves (the slots copied as they are) decode otherwise: the check
				// above can fail.
				prefillAt(t, m, kv, src, tokens, 0)
				raw := read(src)
				moved := make([]byte, len(dst)*kv.BlockBytes())
				for i, from := range keep {
					row := spec.HeadDim * dt.BlockBytes()
					copy(moved[i/bs*kv.BlockBytes()+i%bs*row:][:row], raw[from/bs*kv.BlockBytes()+from%bs*row:][:row])
				}
				if err := kv.WriteBlocks(dst, moved); err != nil {
					t.Fatal(err)
				}
				if u := relErr([][]float32{decodeAt(t, m, kv, dst, 77, len(keep))}, [][]float32{wantLogits}); u < 100*tol {
					t.Errorf("unrotated moves give logits only %.3g from the recomputation: the test shows nothing", u)
				}
				// StreamingLLM's whole-block drop (ShiftKeys): the kept tokens computed at
				// positions 40.. and shifted by -40 are those computed at 0...
				prefillAt(t, m, kv, src, kept, 40)
				if err := kv.ShiftKeys(src, -40); err != nil {
					t.Fatal(err)
				}
				shifted := decodeAt(t, m, kv, src, 77, len(keep))
				if e := relErr([][]float32{shifted}, [][]float32{wantLogits}); e > 10*tol {
					t.Errorf("shifted keys: next-token logits %.3g from the unshifted prefill's", e)
				}
			})
		}
	}
}

// TestShiftKeysMLAQuantized: streaming's shift of a quantized MLA cache (int8, FP8): each
// [kr | c] vector is dequantized, kr rotated, and quantized again with a scale of its own,
// so the next token's logits match the unshifted prefill's up to that second rounding,
// and differ clearly without the shift.
func TestShiftKeysMLAQuantized(t *testing.T) {
	const bs, n = 4, 9
	tokens := testTokens(n)
	s, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(s.Config)
	c.Layers = 1
	fm := writeTwin(t, c, quant.F32, synth.GGUF)
	for _, dt := range []quant.Type{quant.KVInt8, quant.KVFP8E4M3} {
		t.Run(dt.String(), func(t *testing.T) {
			m := cpuModel(t, fm, Parallel{1, 1}, dt)
			kv, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			plain, moved := []int32{1, 2, 3}, []int32{7, 4, 9}
			prefillAt(t, m, kv, plain, tokens, 0)
			want := decodeAt(t, m, kv, plain, 77, n)
			prefillAt(t, m, kv, moved, tokens, 40)
			unshifted := decodeAt(t, m, kv, moved, 77, n)
			prefillAt(t, m, kv, moved, tokens, 40)
			if err := kv.ShiftKeys(moved, -40); err != nil {
				t.Fatal(err)
			}
			got := decodeAt(t, m, kv, moved, 77, n)
			tol := map[quant.Type]float64{quant.KVInt8: 2e-2, quant.KVFP8E4M3: 8e-2}[dt]
			e := relErr([][]float32{got}, [][]float32{want})
			if e > tol {
				t.Errorf("shifted: logits %.3g from the unshifted prefill's, allowed %g", e, tol)
			}
			u := relErr([][]float32{unshifted}, [][]float32{want})
			t.Logf("%s: shifted %.3g, unshifted %.3g from the prefill at 0", dt, e, u)
			if u < 10*e || u < 1e-3 {
				t.Errorf("without the shift the logits are %.3g apart, with it %.3g: the test shows nothing", u, e)
			}
		})
	}
}
