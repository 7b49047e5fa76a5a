package kvasir

import (
	"context"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// TestGPUDecoderEmbedder: a decoder's pooling engine on the GPU (F32 KV cache, prefix
// caching on) embeds 12 inputs sharing a 200-token prefix, in one call and one at a time,
// as the CPU's engine does with prefix caching off (cosine >= 0.9999 per input, last-token
// and mean pooling); last-token pooling takes the prefix from the GPU's cache, and no
// block stays held.
func TestGPUDecoderEmbedder(t *testing.T) {
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	path := writeDecoder(t, -1)
	inputs := sharedPrefixInputs(12, 200)
	ctx := context.Background()
	for _, pooling := range []string{"last", "mean"} {
		cpu, err := OpenEmbedder(path, EmbedderOptions{Pooling: pooling, Threads: 2, MaxBatchTokens: 64, DisablePrefixCaching: true})
		if err != nil {
			t.Fatal(err)
		}
		want, err := cpu.Embed(ctx, inputs)
		cpu.Close()
		if err != nil {
			t.Fatal(err)
		}
		gpu, err := OpenEmbedder(path, EmbedderOptions{Pooling: pooling, Device: Device{CUDA: true}, MaxBatchTokens: 64, KVCacheMemory: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		together, err := gpu.Embed(ctx, inputs)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			alone, err := gpu.Embed(ctx, []EmbedInput{in})
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range map[string][]float32{"together": together[i], "alone": alone[0]} {
				if c := vecCosine(v, want[i]); c < 0.9999 {
					t.Errorf("%s, %s: input %d: cosine %.6f to the CPU's", pooling, name, i, c)
				}
			}
		}
		st := gpu.eng.Stats()
		if pooling == "last" && st.PrefixHits < int64(2*len(inputs)-1)*192 {
			t.Errorf("last-token pooling on the GPU: %d prefix hits of %d looked up", st.PrefixHits, st.PrefixQueries)
		}
		if pooling == "mean" && st.PrefixHits != 0 {
			t.Errorf("mean pooling on the GPU took %d prefix hits", st.PrefixHits)
		}
		deadline := time.Now().Add(10 * time.Second)
		for gpu.eng.Stats().UsedBlocks != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // the stats are published after the last step's outputs
		}
		if n := gpu.eng.Stats().UsedBlocks; n != 0 {
			t.Errorf("%s: %d blocks held after the calls", pooling, n)
		}
		gpu.Close()
	}
}
