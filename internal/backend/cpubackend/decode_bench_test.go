package cpubackend_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// BenchmarkDecodeSynth times single-sequence decode steps of a synthesized smollm2-135m
// model (Q8_0, Q4_0 and BF16 weights) on the CPU backend, as `kvasir bench generate` does, after
// a prompt of 128 or 2,048 tokens (decoding 64 tokens from there, again and again), with an
// F32 or F16 KV cache; it reports the wall time per token of each kind of op (run it with
// -cpuprofile to see more of where a token's time goes). Select one case with, for
// example, -bench 'DecodeSynth/Q8_0/ctx2048/F16'.
func BenchmarkDecodeSynth(b *testing.B) {
	const genLen = 64
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.BF16} {
		for _, promptLen := range []int{128, 2048} {
			for _, kvType := range []quant.Type{quant.F32, quant.F16} {
				b.Run(fmt.Sprintf("%s/ctx%d/%s", typ, promptLen, kvType), func(b *testing.B) {
					benchDecode(b, typ, kvType, promptLen, genLen)
				})
			}
		}
	}
}

// benchDecode is one case of BenchmarkDecodeSynth.
func benchDecode(b *testing.B, typ, kvType quant.Type, promptLen, genLen int) {
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		b.Fatal(err)
	}
	fm, err := synth.Model(shape, typ, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer fm.Close()
	tb := &timedBackend{Backend: cpubackend.New(2), t: map[string]time.Duration{}}
	defer tb.Close()
	m, err := model.New(fm, model.Options{Backends: []backend.Backend{tb}, KVCacheDType: kvType})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession(promptLen + genLen + 1)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 11))
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(r.IntN(shape.Config.VocabSize))
	}
	if _, err := s.Prefill(prompt); err != nil {
		b.Fatal(err)
	}
	clear(tb.t)
	steps := 0
	for b.Loop() {
		if steps%genLen == 0 {
			s.Truncate(promptLen) // decode the same context lengths again
		}
		steps++
		logits, err := s.Step(int32(steps % shape.Config.VocabSize))
		if err != nil {
			b.Fatal(err)
		}
		_ = sample.Greedy(logits)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	for k, d := range tb.t {
		b.ReportMetric(float64(d.Microseconds())/float64(b.N), k+"-us/tok")
	}
}

// timedBackend is the CPU backend with the wall time of its main ops added up by kind.
type timedBackend struct {
	*cpubackend.Backend
	t map[string]time.Duration
}

func (b *timedBackend) add(k string, t0 time.Time) { b.t[k] += time.Since(t0) }
func (b *timedBackend) MatMul(out, x, w backend.Tensor) error {
	defer b.add("matmul", time.Now())
	return b.Backend.MatMul(out, x, w)
}
func (b *timedBackend) MatMuls(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	defer b.add("matmuls", time.Now())
	return b.Backend.MatMuls(outs, x, ws)
}
func (b *timedBackend) MatMulSwiGLU(out, x, gate, up backend.Tensor) error {
	defer b.add("swiglu", time.Now())
	return b.Backend.MatMulSwiGLU(out, x, gate, up)
}
func (b *timedBackend) Attention(out, q backend.Tensor, kv backend.KVCache, layer int, scale float32, st backend.Step) error {
	defer b.add("attention", time.Now())
	return b.Backend.Attention(out, q, kv, layer, scale, st)
}
func (b *timedBackend) RopeKVWrite(q, k, v backend.Tensor, rope backend.Rope, kv backend.KVCache, layer int, st backend.Step) error {
	defer b.add("rope", time.Now())
	return b.Backend.RopeKVWrite(q, k, v, rope, kv, layer, st)
}
func (b *timedBackend) RMSNormResidual(out, residual, x, weight backend.Tensor, eps float32) error {
	defer b.add("norm", time.Now())
	return b.Backend.RMSNormResidual(out, residual, x, weight, eps)
}
func (b *timedBackend) Logits(dst []float32, x, w backend.Tensor) error {
	defer b.add("logits", time.Now())
	return b.Backend.Logits(dst, x, w)
}
