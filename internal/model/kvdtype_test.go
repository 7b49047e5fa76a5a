package model

import (
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// TestStoriesF16Cache checks an F16 KV cache against run.c (whose cache is fp32): with
// run.c's tokens fed in, every step's logits stay within 5e-2 of run.c's (halves carry 11
// significant bits; the measured worst is 0.025) and every step's greedy token is the one
// run.c generated next, so greedy decoding from BOS follows run.c for all 200 tokens. The
// cache takes half the bytes per token.
func TestStoriesF16Cache(t *testing.T) {
	steps := readLogits(t)
	fm, _ := openStories(t, "stories260K.bin")
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{}), KVCacheDType: quant.F16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f32, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	if got, want := m.KVBytesPerToken(), f32.KVBytesPerToken()/2; got != want {
		t.Errorf("f16 cache: %d bytes per token, want half the f32 cache's (%d)", got, want)
	}
	s, err := m.NewSession(512)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, st := range steps {
		got, err := s.Step(int32(st.Token))
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range got {
			worst = max(worst, math.Abs(float64(v-st.Logits[j])))
		}
		if worst > 5e-2 {
			t.Fatalf("step %d: logits differ from run.c's by %g > 5e-2", i, worst)
		}
		if i+1 < len(steps) && sample.Greedy(got) != steps[i+1].Token {
			t.Fatalf("step %d: greedy token %d, run.c's %d", i, sample.Greedy(got), steps[i+1].Token)
		}
	}
	t.Logf("max abs logit difference from run.c over 200 steps: %.3g", worst)
}

// TestKVCacheDTypeRefused: a model refuses a KV cache element type no cache holds, and the
// CPU backend refuses BF16 with a clear error when the cache is made.
func TestKVCacheDTypeRefused(t *testing.T) {
	fm, _ := openStories(t, "stories260K.bin")
	if _, err := New(fm, Options{Backends: cpuBackends(t, 1, Parallel{}), KVCacheDType: quant.Q4_0}); err == nil {
		t.Error("a q4_0 KV cache accepted")
	}
	m, err := New(fm, Options{Backends: cpuBackends(t, 1, Parallel{}), KVCacheDType: quant.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.NewKVCache(4, 16); err == nil {
		t.Error("a bf16 KV cache made on the CPU")
	}
}
