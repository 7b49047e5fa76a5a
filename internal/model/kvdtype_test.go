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

// TestStoriesQuantizedCache measures the quantized caches against run.c (whose cache is
// fp32), with run.c's 200 greedy tokens fed in: the share of steps whose greedy token is
// the one run.c generated next, and the largest logit difference. stories260K's head
// vectors have 8 elements, so each takes one scale (12 bytes against f16's 16). The bounds
// are the measured figures (of 199: int8 196, max difference 1.08; e4m3 191, 2.08; e5m2
// 185, 4.41) less a margin; the cache
// takes the bytes per token its layout says.
func TestStoriesQuantizedCache(t *testing.T) {
	steps := readLogits(t)
	fm, _ := openStories(t, "stories260K.bin")
	c := fm.Config
	for _, tc := range []struct {
		dt        quant.Type
		minAgree  int
		maxLogitD float64
	}{{quant.KVInt8, 193, 1.5}, {quant.KVFP8E4M3, 186, 3}, {quant.KVFP8E5M2, 178, 6}} {
		m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{}), KVCacheDType: tc.dt})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.KVBytesPerToken(), int64(2*c.Layers*c.KVHeads*(c.HeadDim+4)); got != want {
			t.Errorf("%s cache: %d bytes per token, want %d", tc.dt, got, want)
		}
		s, err := m.NewSession(512)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		agree := 0
		for i, st := range steps {
			got, err := s.Step(int32(st.Token))
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range got {
				worst = max(worst, math.Abs(float64(v-st.Logits[j])))
			}
			if i+1 < len(steps) && sample.Greedy(got) == steps[i+1].Token {
				agree++
			}
		}
		m.Close()
		t.Logf("%s cache: greedy token agrees with run.c's at %d of %d steps; max abs logit difference %.3g", tc.dt, agree, len(steps)-1, worst)
		if agree < tc.minAgree || worst > tc.maxLogitD {
			t.Errorf("%s cache: %d of %d greedy tokens agree (want >= %d), logits differ by up to %.3g (want <= %g)", tc.dt, agree, len(steps)-1, tc.minAgree, worst, tc.maxLogitD)
		}
	}
}
